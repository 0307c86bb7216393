// One contract for every key-record backend (claim-first): the same assertions on Postgres, on
// Redis, on a Redis Cluster (three masters, a replica each) and on MySQL (MariaDB). Principal and service scoping, the keyed fingerprint (422 on another body, not on
// another key order), 409 with Retry-After while an attempt runs, the lease and its takeover
// after a SIGKILLed attempt, a 5xx that is not final, the sealed byte-exact replay, the size cap
// and its reference, the quota. Then what only Redis has: the records' TTL against the published
// window, the refusal of transactional requests, NOSCRIPT and a Redis that is down.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  FingerprintMismatchError,
  IdempotencyStore,
  KeyInUseError,
  KeyQuotaExceededError,
  problemFor,
  ResponseKeyRing,
  ResponseNotStorableError,
  TransactionsUnsupportedError,
  type IdempotentCall,
  type WorkResult,
} from '@retrysafe/store';
import { idempotent } from '@retrysafe/store/express';
import { RedisBackend, RedisUnavailableError, recordKey } from '@retrysafe/store/redis';
import { useTestDatabase } from '../helpers/database';
import { startRedis } from '../helpers/redis';
import { keyBackendKinds, keyBackendKindsWithCluster, useKeyBackend } from '../helpers/store-backends';
import { CLAIM_AND_HANG, createTestStore, jsonResult, LiveKeyQuota, newResponseKey, principal, signal, sleep, TEST_SERVICE, testPolicy } from '../helpers/store';

const ENDPOINT = 'POST /refunds';

describe.each(keyBackendKindsWithCluster)('key records on %s (claim-first)', (kind) => {
  const db = useTestDatabase();
  const keys = useKeyBackend(kind, db);
  const testStore = (options: Parameters<typeof createTestStore>[1] = {}) => createTestStore(db.pool, { ...options, backend: keys.backend() });

  const call = (principalId: string, key: string, work: IdempotentCall['work'], extra: Partial<IdempotentCall> = {}): IdempotentCall => ({
    principalId,
    key,
    endpoint: ENDPOINT,
    method: 'POST',
    body: { amount: 5, currency: 'EUR' },
    policy: testPolicy,
    mode: 'claim-first',
    work,
    ...extra,
  });
  const mustNotRun = () => Promise.reject(new Error('must not run'));

  it('answers 409 with Retry-After while the attempt runs, then replays byte for byte with the original correlation id', async () => {
    const { store, events } = testStore();
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
    const busy = await store.execute(call(p, 'k', mustNotRun)).catch((error: unknown) => error);
    expect(busy).toBeInstanceOf(KeyInUseError);
    expect((busy as KeyInUseError).retryAfterSeconds).toBeGreaterThanOrEqual(9);
    expect(await keys.stateOf(p, 'k', ENDPOINT)).toEqual([{ state: 'in_progress', attempts: 1 }]);
    release(jsonResult(201, { first: true, text: 'é\u0000\u{1f600}' }));
    const first = await running;
    // Another order of the body's keys is the same request.
    const replay = await store.execute(call(p, 'k', mustNotRun, { body: { currency: 'EUR', amount: 5 } }));
    expect(replay).toMatchObject({ replayed: true, status: 201, contentType: 'application/json', correlationId: first.correlationId });
    expect(replay.body.equals(first.body)).toBe(true);
    expect(events.map((event) => event.outcome)).toEqual(['new', 'conflict', 'replay']);
  });

  it('answers 422 for the key with another body, and runs nothing', async () => {
    const { store, events } = testStore();
    const p = principal();
    await store.execute(call(p, 'k', () => Promise.resolve(jsonResult(201, { ok: true }))));
    await expect(store.execute(call(p, 'k', mustNotRun, { body: { amount: 6, currency: 'EUR' } }))).rejects.toBeInstanceOf(FingerprintMismatchError);
    expect(events.map((event) => event.outcome)).toEqual(['new', 'mismatch']);
  });

  it('keeps keys apart by principal, service and scope: none sees or replays another', async () => {
    const { store, secret, keyRing } = testStore();
    const [a, b] = [principal(), principal()];
    const first = await store.execute(call(a, 'shared', () => Promise.resolve(jsonResult(201, { owner: 'a' }))));
    // Another principal, the same key and body: a new key of its own, its own work.
    const other = await store.execute(call(b, 'shared', () => Promise.resolve(jsonResult(201, { owner: 'b' }))));
    expect([other.replayed, other.body.toString()]).toEqual([false, '{"owner":"b"}']);
    // Another service on the same store of records, the same principal, key and body.
    const otherService = new IdempotencyStore({ pool: db.pool, backend: keys.backend(), service: 'billing', fingerprintSecret: secret, keyRing });
    const billing = await otherService.execute(call(a, 'shared', () => Promise.resolve(jsonResult(201, { owner: 'billing' }))));
    expect([billing.replayed, billing.body.toString()]).toEqual([false, '{"owner":"billing"}']);
    // Another endpoint (endpoint scope).
    const refund = await store.execute(call(a, 'shared', () => Promise.resolve(jsonResult(201, { owner: 'payments' })), { endpoint: 'POST /payments' }));
    expect(refund.replayed).toBe(false);
    const replay = await store.execute(call(a, 'shared', mustNotRun));
    expect(replay.body.equals(first.body)).toBe(true);
    expect(await keys.stateOf(b, 'shared', ENDPOINT)).toEqual([{ state: 'completed', attempts: 1 }]);
    expect(await keys.stateOf(a, 'shared', ENDPOINT, 'billing')).toEqual([{ state: 'completed', attempts: 1 }]);
  });

  it('lets exactly one of many concurrent first requests run', async () => {
    const { store } = testStore();
    const p = principal();
    let runs = 0;
    const results = await Promise.allSettled(
      Array.from({ length: 16 }, () =>
        store.execute(
          call(p, 'k', async () => {
            runs += 1;
            await sleep(300);
            return jsonResult(201, { run: runs });
          }),
        ),
      ),
    );
    expect(runs).toBe(1);
    for (const result of results) {
      if (result.status === 'rejected') expect(result.reason).toBeInstanceOf(KeyInUseError);
    }
  });

  it('marks a 5xx failed and retryable: the retry runs the work again', async () => {
    const { store, events } = testStore();
    const p = principal();
    const failed = await store.execute(call(p, 'k', () => Promise.resolve(jsonResult(502, { error: 'processor' }))));
    expect(failed.status).toBe(502);
    expect(await keys.stateOf(p, 'k', ENDPOINT)).toEqual([{ state: 'failed', attempts: 1 }]);
    const retry = await store.execute(call(p, 'k', () => Promise.resolve(jsonResult(201, { ok: true }))));
    expect([retry.status, retry.replayed]).toEqual([201, false]);
    expect(await keys.stateOf(p, 'k', ENDPOINT)).toEqual([{ state: 'completed', attempts: 2 }]);
    expect(events.map((event) => event.outcome)).toEqual(['new', 'takeover']);
  });

  it('stores and replays a 4xx outcome of work that started', async () => {
    const { store } = testStore();
    const p = principal();
    await store.execute(call(p, 'k', () => Promise.resolve(jsonResult(404, { error: 'no such payment' }))));
    const replay = await store.execute(call(p, 'k', mustNotRun));
    expect([replay.status, replay.replayed]).toEqual([404, true]);
  });

  it('lets exactly one of many concurrent retries take over a lease that passed', async () => {
    const { store } = testStore();
    const p = principal();
    const leaseMs = 300;
    const { work: _work, mode: _mode, ...claimCall } = call(p, 'k', mustNotRun, { policy: { ...testPolicy, leaseMs } });
    const crashed = await store.begin(claimCall);
    expect(crashed.claimed).toBe(true); // and never finished, as a crashed attempt
    await sleep(leaseMs + 100);
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
            call(
              p,
              'k',
              async () => {
                runs += 1;
                await othersAnswered();
                return jsonResult(201, { run: runs });
              },
              { policy: { ...testPolicy, leaseMs: 10_000 } },
            ),
          )
          .finally(() => {
            answered += 1;
          }),
      ),
    );
    expect(runs).toBe(1);
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(1);
    for (const result of results) if (result.status === 'rejected') expect(result.reason).toBeInstanceOf(KeyInUseError);
    expect(await keys.stateOf(p, 'k', ENDPOINT)).toEqual([{ state: 'completed', attempts: 2 }]);
  });

  it('recovers from a SIGKILLed attempt: 409 before the lease ends, exactly one run after', async () => {
    const secret = randomBytes(32);
    const responseKey = newResponseKey();
    const { store } = testStore({ secret, keys: [responseKey] });
    const p = principal();
    const leaseMs = 1_500;
    const args = ['--conditions=retrysafe-source', '--import', 'tsx', CLAIM_AND_HANG, db.url, p, 'k', String(leaseMs), secret.toString('hex'), responseKey.key.toString('hex'), 'plain'];
    const backendUrl = keys.url();
    if (backendUrl) args.push(backendUrl);
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((claimed, fail) => {
      child.stdout.on('data', (chunk: Buffer) => chunk.toString().includes('claimed') && claimed());
      child.once('exit', (code) => fail(new Error(`fixture exited early (${code})`)));
    });
    const exited = new Promise((done) => child.once('exit', done));
    child.kill('SIGKILL');
    await exited;
    expect(await keys.stateOf(p, 'k', ENDPOINT)).toEqual([{ state: 'in_progress', attempts: 1 }]);

    let runs = 0;
    const work = () => {
      runs += 1;
      return Promise.resolve(jsonResult(201, { refunded: true }));
    };
    // The fixture's request: its body, and a policy with this lease.
    const leased = { body: { amount: 5 }, policy: { ...testPolicy, leaseMs } };
    await expect(store.execute(call(p, 'k', work, leased))).rejects.toBeInstanceOf(KeyInUseError);
    expect(runs).toBe(0);
    await sleep(leaseMs + 200);
    const retries = await Promise.allSettled([store.execute(call(p, 'k', work, leased)), store.execute(call(p, 'k', work, leased))]);
    expect(runs).toBe(1);
    expect(retries.filter((result) => result.status === 'fulfilled').length).toBeGreaterThanOrEqual(1);
    const after = await store.execute(call(p, 'k', work, leased));
    expect(after.replayed).toBe(true);
    expect(runs).toBe(1);
    expect(await keys.stateOf(p, 'k', ENDPOINT)).toEqual([{ state: 'completed', attempts: 2 }]);
  });

  it('does not let a superseded attempt overwrite the response of the attempt that took over', async () => {
    const lost: string[] = [];
    const { store } = testStore({ onLeaseLost: (id) => lost.push(id.key) });
    const p = principal();
    const short = { policy: { ...testPolicy, leaseMs: 200 } };
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
        short,
      ),
    );
    await slowStarted;
    await sleep(300); // the slow attempt's lease (200 ms from its claim, made before its work began) has passed
    const fast = await store.execute(call(p, 'k', () => Promise.resolve(jsonResult(201, { from: 'fast' })), short));
    release();
    await slow;
    expect(lost).toEqual(['k']);
    const replay = await store.execute(call(p, 'k', mustNotRun, short));
    expect(replay.body.equals(fast.body)).toBe(true);
  });

  it('offers the claim without a callback: begin, then finish or abandon', async () => {
    const { store } = testStore();
    const p = principal();
    const { work: _work, mode: _mode, ...claimCall } = call(p, 'k', mustNotRun);
    const first = await store.begin(claimCall);
    if (!first.claimed) throw new Error('expected a claim');
    await first.abandon();
    expect(await keys.stateOf(p, 'k', ENDPOINT)).toEqual([{ state: 'failed', attempts: 1 }]);
    const second = await store.begin(claimCall);
    if (!second.claimed) throw new Error('expected a takeover');
    const done = await second.finish(jsonResult(201, { ok: 1 }));
    const third = await store.begin(claimCall);
    if (third.claimed) throw new Error('expected a replay');
    expect(third.outcome.replayed).toBe(true);
    expect(third.outcome.body.equals(done.body)).toBe(true);
  });

  it('seals what it stores, caps it, and replays a body over the cap from its reference', async () => {
    const { store } = testStore();
    const p = principal();
    const capped = { policy: { ...testPolicy, maxResponseBytes: 64 } };
    const big = jsonResult(201, { export: 'x'.repeat(200) });
    await expect(store.execute(call(p, 'no-ref', () => Promise.resolve(big), capped))).rejects.toBeInstanceOf(ResponseNotStorableError);
    const original = await store.execute(call(p, 'ref', () => Promise.resolve({ ...big, reference: 'export-7' }), capped));
    const replay = await store.execute(call(p, 'ref', mustNotRun, { ...capped, rederive: (reference) => Promise.resolve(reference === 'export-7' ? big.body : Buffer.alloc(0)) }));
    expect(replay.replayed).toBe(true);
    expect(replay.body.equals(original.body)).toBe(true);
    // A stored body is ciphertext: the plaintext appears nowhere in the stored record.
    const secretText = 'card-4242-secret';
    await store.execute(call(p, 'sealed', () => Promise.resolve(jsonResult(201, { secretText }))));
    const stored = await keys.storedBody(p, 'sealed', ENDPOINT);
    expect(Buffer.isBuffer(stored) && stored.length > secretText.length).toBe(true);
    expect(stored?.includes(Buffer.from(secretText))).toBe(false);
  });

  it('refuses a new key over the live-key quota (429), while existing keys still replay', async () => {
    const quota = new LiveKeyQuota(db.pool, { service: TEST_SERVICE, flushIntervalMs: 600_000 });
    const { store } = testStore({ quota });
    const p = principal();
    const limited = { policy: { ...testPolicy, liveKeyQuota: 2 } };
    for (const key of ['q1', 'q2']) await store.execute(call(p, key, () => Promise.resolve(jsonResult(201, { key })), limited));
    const refused = await store.execute(call(p, 'q3', mustNotRun, limited)).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(KeyQuotaExceededError);
    expect(problemFor(refused)?.status).toBe(429);
    expect((await store.execute(call(p, 'q1', mustNotRun, limited))).replayed).toBe(true);
    await quota.stop();
  });
});

describe.runIf(keyBackendKinds.includes('redis'))('key records on redis: what only Redis has', () => {
  const db = useTestDatabase();
  const keys = useKeyBackend('redis', db);
  const pttlOf = async (principalId: string, key: string) => Number(await keys.redis?.command('PTTL', recordKey({ principalId, service: TEST_SERVICE, scope: ENDPOINT, key })));
  const call = (principalId: string, key: string, extra: Partial<IdempotentCall> = {}): IdempotentCall => ({
    principalId,
    key,
    endpoint: ENDPOINT,
    method: 'POST',
    body: { amount: 5 },
    policy: testPolicy,
    mode: 'claim-first',
    work: () => Promise.resolve(jsonResult(201, { ok: true })),
    ...extra,
  });

  it('expires each record by Redis after the retention, never before the published window: at claim, completion and takeover', async () => {
    const { store } = createTestStore(db.pool, { backend: keys.backend() });
    const p = principal();
    const { work: _work, mode: _mode, ...claimCall } = call(p, 'k', { policy: { ...testPolicy, leaseMs: 200 } });
    const begun = await store.begin(claimCall);
    if (!begun.claimed) throw new Error('expected a claim');
    const atClaim = await pttlOf(p, 'k');
    expect(atClaim).toBeGreaterThanOrEqual(testPolicy.retryWindowMs);
    expect(atClaim).toBeLessThanOrEqual(testPolicy.retentionMs);
    await sleep(300);
    await store.execute(call(p, 'k')); // takes the passed lease over and completes
    expect(await keys.stateOf(p, 'k', ENDPOINT)).toEqual([{ state: 'completed', attempts: 2 }]);
    const atCompletion = await pttlOf(p, 'k');
    expect(atCompletion).toBeGreaterThanOrEqual(testPolicy.retryWindowMs);
    expect(atCompletion).toBeLessThanOrEqual(atClaim);
    // A route whose own policy keeps keys for less than its window still keeps them for the window.
    await store.execute(call(p, 'short', { policy: { ...testPolicy, retentionMs: 60_000 } }));
    expect(await pttlOf(p, 'short')).toBeGreaterThan(testPolicy.retryWindowMs - 60_000);
    expect(await pttlOf(p, 'short')).toBeLessThanOrEqual(testPolicy.retryWindowMs);
  });

  it('refuses a transactional request, and a transactional route where it is created, naming claim-first', async () => {
    const { store } = createTestStore(db.pool, { backend: keys.backend() });
    let runs = 0;
    const transactional = call(principal(), 'tx', {
      mode: 'transactional',
      work: () => {
        runs += 1;
        return Promise.resolve(jsonResult(201, {}));
      },
    });
    const refused = await store.execute(transactional).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(TransactionsUnsupportedError);
    expect((refused as Error).message).toMatch(/claim-first only/);
    expect(runs).toBe(0);
    expect(await keys.stateOf(transactional.principalId, 'tx', ENDPOINT)).toEqual([]);
    await expect(keys.backend()?.transaction(1_000)).rejects.toBeInstanceOf(TransactionsUnsupportedError);
    expect(() =>
      idempotent(store, {
        endpoint: ENDPOINT,
        method: 'POST',
        mode: 'transactional',
        policy: testPolicy,
        maxBodyBytes: 1_024,
        input: { safeParse: (value: unknown) => ({ success: true as const, data: value }) },
        authenticate: () => ({ principalId: principal() }),
        work: () => Promise.resolve(jsonResult(201, {})),
      }),
    ).toThrow(TransactionsUnsupportedError);
  });

  it('claims in one round trip and completes in one, by the script SHA, sending the script again after SCRIPT FLUSH', async () => {
    const redis = keys.redis;
    if (!redis) throw new Error('no redis');
    const sent: string[] = [];
    const counted = { sendCommand: (args: ReadonlyArray<string | Buffer>) => (sent.push(String(args[0])), redis.connection.commands.sendCommand(args)) };
    const { store } = createTestStore(db.pool, { backend: new RedisBackend(counted, { db: db.pool }) });
    const p = principal();
    await store.execute(call(p, 'before'));
    expect(sent).toEqual(['EVALSHA', 'EVALSHA']); // the claim, the completion
    sent.length = 0;
    expect((await store.execute(call(p, 'before'))).replayed).toBe(true);
    expect(sent).toEqual(['EVALSHA']); // a replay: the claim returns the record
    sent.length = 0;
    await redis.command('SCRIPT', 'FLUSH');
    const again = await store.execute(call(p, 'after'));
    expect(again.replayed).toBe(false);
    // Each EVALSHA met NOSCRIPT once, and its EVAL loaded the script.
    expect(sent).toEqual(['EVALSHA', 'EVAL', 'EVALSHA', 'EVAL']);
    sent.length = 0;
    const replay = await store.execute(call(p, 'after'));
    expect(replay.replayed).toBe(true);
    expect(replay.body.equals(again.body)).toBe(true);
    expect(sent).toEqual(['EVALSHA']);
  });

  it('recovers by itself after Redis restarts: 503 while it is away, then claims again (scripts sent anew)', async () => {
    const own = await startRedis();
    const store = new IdempotencyStore({
      pool: db.pool,
      backend: new RedisBackend(own.connection.commands, { db: db.pool }),
      service: TEST_SERVICE,
      fingerprintSecret: randomBytes(32),
      keyRing: new ResponseKeyRing([newResponseKey()]),
    });
    try {
      await store.execute(call(principal(), 'before'));
      await own.restart();
      const statuses: number[] = [];
      const deadline = Date.now() + 10_000;
      for (;;) {
        const answer = await store.execute(call(principal(), 'after')).then(
          () => 201,
          (error: unknown) => problemFor(error)?.status ?? 500,
        );
        statuses.push(answer);
        if (answer === 201 || Date.now() > deadline) break;
        await sleep(50);
      }
      expect(statuses.at(-1)).toBe(201);
      expect(statuses.every((status) => status === 201 || status === 503)).toBe(true);
    } finally {
      await own.stop();
    }
  });

  it('answers 503 with Retry-After when Redis is down (the request ran to no outcome: a retry is safe)', async () => {
    const own = await startRedis();
    const store = new IdempotencyStore({
      pool: db.pool,
      backend: new RedisBackend(own.connection.commands, { db: db.pool }),
      service: TEST_SERVICE,
      fingerprintSecret: randomBytes(32),
      keyRing: new ResponseKeyRing([newResponseKey()]),
    });
    await store.execute(call(principal(), 'up'));
    await own.stop();
    const down = await store.execute(call(principal(), 'down')).catch((error: unknown) => error);
    expect(down).toBeInstanceOf(RedisUnavailableError);
    expect(problemFor(down)).toMatchObject({ status: 503 });
  });
});
