// Claim-first mode on MySQL/MariaDB: the claim commits with a lease before the work; completion
// is fenced by the attempt number; a crashed attempt is taken over (SELECT ... FOR UPDATE) once
// its lease has passed. The shapes of store-claim-first.test.ts, on a MariaDB of this file's own.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import type { Pool, RowDataPacket } from 'mysql2/promise';
import { beforeAll, describe, expect, it } from 'vitest';
import { KeyInUseError, type IdempotentCall, type WorkResult } from '@retrysafe/store';
import type { MysqlQueryable } from '@retrysafe/store/mysql';
import { createMysqlTestStore, hasMariaDb, useMariaDb } from '../helpers/mariadb';
import { jsonResult, newResponseKey, principal, sleep, TEST_SERVICE, testPolicy } from '../helpers/store';

const ENDPOINT = 'POST /refunds';

describe.skipIf(!hasMariaDb)('store on MariaDB, claim-first mode', () => {
  const mariadb = useMariaDb();
  let pool: Pool;

  beforeAll(() => {
    pool = mariadb.server.pool(24);
  });

  const call = (principalId: string, key: string, work: IdempotentCall<MysqlQueryable>['work'], leaseMs = testPolicy.leaseMs): IdempotentCall<MysqlQueryable> => ({
    principalId,
    key,
    endpoint: ENDPOINT,
    method: 'POST',
    body: { amount: 5 },
    policy: { ...testPolicy, leaseMs },
    mode: 'claim-first',
    work,
  });

  const rowOf = async (principalId: string) => {
    const [rows] = await pool.query<(RowDataPacket & { state: string; attempts: number })[]>(
      'SELECT state, attempts FROM retrysafe_idempotency_keys WHERE principal_id = ?',
      [principalId],
    );
    return rows.map((row) => ({ state: row.state, attempts: row.attempts }));
  };

  it('answers 409 with Retry-After while the attempt runs, and replays once it completed', async () => {
    const { store, events } = createMysqlTestStore(pool);
    const p = principal();
    let release: (result: WorkResult) => void = () => undefined;
    let started: () => void = () => undefined;
    const claimed = new Promise<void>((done) => (started = done));
    const running = store.execute(
      call(p, 'k', () => {
        started();
        return new Promise<WorkResult>((done) => (release = done));
      }),
    );
    await claimed;
    const busy = await store.execute(call(p, 'k', () => Promise.resolve(jsonResult(201, { second: true })))).catch((error: unknown) => error);
    expect(busy).toBeInstanceOf(KeyInUseError);
    expect((busy as KeyInUseError).retryAfterSeconds).toBeGreaterThanOrEqual(9);
    release(jsonResult(201, { first: true }));
    const first = await running;
    const replay = await store.execute(call(p, 'k', () => Promise.reject(new Error('must not run'))));
    expect(replay.replayed).toBe(true);
    expect(replay.body.equals(first.body)).toBe(true);
    expect(replay.correlationId).toBe(first.correlationId);
    expect(events.map((event) => event.outcome)).toEqual(['new', 'conflict', 'replay']);
  });

  it('marks a 5xx failed and retryable: the retry runs the work again', async () => {
    const { store, events } = createMysqlTestStore(pool);
    const p = principal();
    const failed = await store.execute(call(p, 'k', () => Promise.resolve(jsonResult(502, { error: 'processor' }))));
    expect(failed.status).toBe(502);
    expect(await rowOf(p)).toEqual([{ state: 'failed', attempts: 1 }]);
    const retry = await store.execute(call(p, 'k', () => Promise.resolve(jsonResult(201, { ok: true }))));
    expect([retry.status, retry.replayed]).toEqual([201, false]);
    expect(await rowOf(p)).toEqual([{ state: 'completed', attempts: 2 }]);
    expect(events.map((event) => event.outcome)).toEqual(['new', 'takeover']);
  });

  it('stores and replays a 4xx outcome byte for byte, and keeps principals and services apart', async () => {
    const secret = randomBytes(32);
    const keys = [newResponseKey()];
    const { store } = createMysqlTestStore(pool, { secret, keys });
    const p = principal();
    const body = Buffer.from([0x7b, 0x22, 0xe2, 0x82, 0xac, 0x22, 0x3a, 0x20, 0x31, 0x7d, 0x0a, 0x00, 0xff]);
    await store.execute(call(p, 'k', () => Promise.resolve({ status: 404, contentType: 'application/x-odd; charset=binary', body })));
    const replay = await store.execute(call(p, 'k', () => Promise.reject(new Error('must not run'))));
    expect([replay.status, replay.replayed, replay.contentType]).toEqual([404, true, 'application/x-odd; charset=binary']);
    expect(replay.body.equals(body)).toBe(true);
    // The same key string under another principal, or another service, is another key.
    const other = await store.execute(call(principal(), 'k', () => Promise.resolve(jsonResult(201, { other: true }))));
    expect(other.replayed).toBe(false);
    const { store: orders } = createMysqlTestStore(pool, { service: 'orders', keys, secret });
    const otherService = await orders.execute(call(p, 'k', () => Promise.resolve(jsonResult(201, { service: 'orders' }))));
    expect(otherService.replayed).toBe(false);
    const [rows] = await pool.query<(RowDataPacket & { service: string })[]>('SELECT service FROM retrysafe_idempotency_keys WHERE principal_id = ? ORDER BY service', [p]);
    expect(rows.map((row) => row.service)).toEqual([TEST_SERVICE, 'orders'].sort());
    // The body is kept sealed (encrypted), never in the clear.
    const [sealed] = await pool.query<(RowDataPacket & { body: Buffer; size: number })[]>(
      'SELECT response_body AS body, response_size AS size FROM retrysafe_idempotency_keys WHERE principal_id = ? AND service = ?',
      [p, TEST_SERVICE],
    );
    expect(sealed[0]?.size).toBe(body.length);
    expect(sealed[0]?.body.includes(body)).toBe(false);
  });

  it('lets exactly one of many concurrent retries take over an expired lease', async () => {
    const { store } = createMysqlTestStore(pool);
    const p = principal();
    // A crashed attempt of the same request: claim it, then move its lease into the past.
    const crashed = await store.begin({ principalId: p, key: 'k', endpoint: ENDPOINT, method: 'POST', body: { amount: 5 }, policy: testPolicy });
    expect(crashed.claimed).toBe(true);
    await pool.query('UPDATE retrysafe_idempotency_keys SET lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE principal_id = ?', [p]);
    let runs = 0;
    let answered = 0;
    const othersAnswered = async () => {
      const deadline = Date.now() + 10_000;
      while (answered < 15 && Date.now() < deadline) await sleep(10);
    };
    const results = await Promise.allSettled(
      Array.from({ length: 16 }, () =>
        store
          .execute(
            call(p, 'k', async () => {
              runs += 1;
              await othersAnswered();
              return jsonResult(201, { run: runs });
            }),
          )
          .finally(() => {
            answered += 1;
          }),
      ),
    );
    expect(runs).toBe(1);
    const fulfilled = results.filter((result) => result.status === 'fulfilled');
    const rejected = results.filter((result) => result.status === 'rejected');
    expect(fulfilled).toHaveLength(1);
    for (const result of rejected) expect(result.reason).toBeInstanceOf(KeyInUseError);
    expect(await rowOf(p)).toEqual([{ state: 'completed', attempts: 2 }]);
  });

  it('recovers from a SIGKILLed attempt: 409 before the lease ends, exactly one run after', async () => {
    const secret = randomBytes(32);
    const responseKey = newResponseKey();
    const { store } = createMysqlTestStore(pool, { secret, keys: [responseKey] });
    const p = principal();
    const leaseMs = 1_500;
    const child = spawn(
      process.execPath,
      ['--conditions=retrysafe-source', '--import', 'tsx', 'test/fixtures/claim-and-hang-mysql.ts', mariadb.server.uri, p, 'k', String(leaseMs), secret.toString('hex'), responseKey.key.toString('hex')],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    await new Promise<void>((claimed, fail) => {
      child.stdout.on('data', (chunk: Buffer) => chunk.toString().includes('claimed') && claimed());
      child.once('exit', (code) => fail(new Error(`fixture exited early (${code})`)));
    });
    const exited = new Promise((done) => child.once('exit', done));
    child.kill('SIGKILL');
    await exited;
    expect(await rowOf(p)).toEqual([{ state: 'in_progress', attempts: 1 }]);

    let runs = 0;
    const work = () => {
      runs += 1;
      return Promise.resolve(jsonResult(201, { refunded: true }));
    };
    await expect(store.execute(call(p, 'k', work, leaseMs))).rejects.toBeInstanceOf(KeyInUseError);
    expect(runs).toBe(0);
    await sleep(leaseMs + 200);
    const retries = await Promise.allSettled([store.execute(call(p, 'k', work, leaseMs)), store.execute(call(p, 'k', work, leaseMs))]);
    expect(runs).toBe(1);
    expect(retries.filter((result) => result.status === 'fulfilled').length).toBeGreaterThanOrEqual(1);
    const after = await store.execute(call(p, 'k', work, leaseMs));
    expect(after.replayed).toBe(true);
    expect(runs).toBe(1);
    expect(await rowOf(p)).toEqual([{ state: 'completed', attempts: 2 }]);
  });

  it('does not let a superseded attempt overwrite the response of the attempt that took over', async () => {
    const lost: string[] = [];
    const { store } = createMysqlTestStore(pool, { onLeaseLost: (id) => lost.push(id.key) });
    const p = principal();
    const slow = store.execute(
      call(
        p,
        'k',
        async () => {
          await sleep(700);
          return jsonResult(201, { from: 'slow' });
        },
        200,
      ),
    );
    await sleep(400); // the slow attempt's lease has passed
    const fast = await store.execute(call(p, 'k', () => Promise.resolve(jsonResult(201, { from: 'fast' })), 200));
    await slow;
    expect(lost).toEqual(['k']);
    const replay = await store.execute(call(p, 'k', () => Promise.reject(new Error('must not run')), 200));
    expect(replay.body.equals(fast.body)).toBe(true);
  });

  it('offers the claim without a callback: begin, then finish or abandon', async () => {
    const { store } = createMysqlTestStore(pool);
    const p = principal();
    const { work: _work, mode: _mode, ...claimCall } = call(p, 'k', () => Promise.reject(new Error('unused')));
    const first = await store.begin(claimCall);
    if (!first.claimed) throw new Error('expected a claim');
    await first.abandon();
    expect(await rowOf(p)).toEqual([{ state: 'failed', attempts: 1 }]);
    const second = await store.begin(claimCall);
    if (!second.claimed) throw new Error('expected a takeover');
    const done = await second.finish(jsonResult(201, { ok: 1 }));
    const third = await store.begin(claimCall);
    expect(third.claimed).toBe(false);
    if (third.claimed) return;
    expect(third.outcome.replayed).toBe(true);
    expect(third.outcome.body.equals(done.body)).toBe(true);
  });
});
