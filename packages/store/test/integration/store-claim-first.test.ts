// Claim-first mode: the claim commits with a lease before the work, which may call
// systems outside the database.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { KeyInUseError } from '@retrysafe/store';
import pg from 'pg';
import { ResponseKeyRing } from '@retrysafe/store';
import { IdempotencyStore, type IdempotentCall, type WorkResult } from '@retrysafe/store';
import { runnable, storeConnections, useTestDatabase } from '../helpers/database';
import { CLAIM_AND_HANG, createTestStore, jsonResult, newResponseKey, principal, signal, sleep, TEST_SERVICE, testPolicy } from '../helpers/store';

const ENDPOINT = 'POST /refunds';

// Each case direct and through a transaction-mode PgBouncer (createRetrysafe's pooler: 'transaction', and 'transaction-prepared' where a PgBouncer 1.21 or later is found), in both layouts.
describe.each(storeConnections.filter(runnable))('store, claim-first mode ($name)', ({ layout, pooler }) => {
  const db = useTestDatabase(layout, { pooler });

  const call = (principalId: string, key: string, work: IdempotentCall['work'], leaseMs = testPolicy.leaseMs): IdempotentCall => ({
    principalId,
    key,
    endpoint: ENDPOINT,
    method: 'POST',
    body: { amount: 5 },
    policy: { ...testPolicy, leaseMs },
    mode: 'claim-first',
    work,
  });

  const rowOf = async (principalId: string) =>
    (
      await db.pool.query<{ state: string; attempts: number }>('SELECT state, attempts FROM idempotency_keys WHERE principal_id = $1', [
        principalId,
      ])
    ).rows;

  it('answers 409 with Retry-After while the attempt runs, and replays once it completed', async () => {
    const { store, events } = createTestStore(db.pool, { layout, pooler });
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
    // The second request once the first one's work runs (not after a fixed delay: on a loaded machine the first may not have claimed yet).
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
    const { store, events } = createTestStore(db.pool, { layout, pooler });
    const p = principal();
    const failed = await store.execute(call(p, 'k', () => Promise.resolve(jsonResult(502, { error: 'processor' }))));
    expect(failed.status).toBe(502);
    expect(await rowOf(p)).toEqual([{ state: 'failed', attempts: 1 }]);
    const retry = await store.execute(call(p, 'k', () => Promise.resolve(jsonResult(201, { ok: true }))));
    expect([retry.status, retry.replayed]).toEqual([201, false]);
    expect(await rowOf(p)).toEqual([{ state: 'completed', attempts: 2 }]);
    expect(events.map((event) => event.outcome)).toEqual(['new', 'takeover']);
  });

  it('stores and replays a 4xx outcome of work that started', async () => {
    const { store } = createTestStore(db.pool, { layout, pooler });
    const p = principal();
    await store.execute(call(p, 'k', () => Promise.resolve(jsonResult(404, { error: 'no such payment' }))));
    const replay = await store.execute(call(p, 'k', () => Promise.reject(new Error('must not run'))));
    expect([replay.status, replay.replayed]).toEqual([404, true]);
  });

  it('lets exactly one of many concurrent retries take over an expired lease', async () => {
    const { store } = createTestStore(db.pool, { layout, pooler });
    const p = principal();
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
       VALUES ($1, $4, $2, 'k', 'in_progress', $3, gen_random_uuid(), now() - interval '1 second', now() + interval '1 hour')`,
      [p, ENDPOINT, Buffer.alloc(32), TEST_SERVICE],
    );
    // The crashed attempt's fingerprint must match for a takeover; fetch ours by claiming another key.
    await store.execute(call(p, 'probe', () => Promise.resolve(jsonResult(201, {}))));
    await db.pool.query(
      "UPDATE idempotency_keys SET fingerprint = (SELECT fingerprint FROM idempotency_keys WHERE principal_id = $1 AND key = 'probe') WHERE principal_id = $1 AND key = 'k'",
      [p],
    );
    // The work runs until every other retry has been answered (at most 10 s), so they all arrive
    // while it runs however slowly a loaded machine serves them (a fixed 200 ms was too short:
    // late retries rightly replayed). A second run would wait out the 10 s and be counted.
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
  });

  it('recovers from a SIGKILLed attempt: 409 before the lease ends, exactly one run after', async () => {
    const secret = randomBytes(32);
    const responseKey = newResponseKey();
    const { store } = createTestStore(db.pool, { layout, pooler, secret, keys: [responseKey] });
    const p = principal();
    const leaseMs = 1_500;
    const child = spawn(
      process.execPath,
      ['--conditions=retrysafe-source', '--import', 'tsx', CLAIM_AND_HANG, db.url, p, 'k', String(leaseMs), secret.toString('hex'), responseKey.key.toString('hex'), layout],
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
    const { store } = createTestStore(db.pool, { layout, pooler, onLeaseLost: (id) => lost.push(id.key) });
    const p = principal();
    // Ordered by the attempts themselves, not by sleeps a loaded machine can stretch: the fast one
    // claims once the slow one's work has begun and its lease has passed, and the slow one finishes
    // only after the fast one has.
    const [slowStarted, started] = signal();
    const [released, release] = signal();
    const slow = store.execute(
      call(
        p,
        'k',
        async () => {
          started();
          await released;
          return jsonResult(201, { from: 'slow' });
        },
        200,
      ),
    );
    await slowStarted;
    await sleep(300); // the slow attempt's lease (200 ms from its claim, made before its work began) has passed
    const fast = await store.execute(call(p, 'k', () => Promise.resolve(jsonResult(201, { from: 'fast' })), 200));
    release();
    await slow;
    expect(lost).toEqual(['k']);
    const replay = await store.execute(call(p, 'k', () => Promise.reject(new Error('must not run')), 200));
    expect(replay.body.equals(fast.body)).toBe(true);
  });

  it('reports a failed attempt it could not mark retryable, and leaves the key to its lease', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    const reported: [string, string][] = [];
    const store = new IdempotencyStore({
      pool,
      service: TEST_SERVICE,
      fingerprintSecret: randomBytes(32),
      keyRing: new ResponseKeyRing([newResponseKey()]),
      layout,
      onAbandonFailed: (error, id) => reported.push([(error as Error).message, id.key]),
    });
    const p = principal();
    // The work crashes, and the pool it would mark the key failed through is gone by then.
    const crashing = call(p, 'k', async () => {
      await pool.end();
      throw new Error('work crashed');
    });
    await expect(store.execute(crashing)).rejects.toThrow('work crashed');
    expect(reported).toEqual([[expect.stringMatching(/pool/i), 'k']]);
    expect(await rowOf(p)).toEqual([{ state: 'in_progress', attempts: 1 }]);
  });

  it('offers the claim without a callback: begin, then finish or abandon', async () => {
    const { store } = createTestStore(db.pool, { layout, pooler });
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
