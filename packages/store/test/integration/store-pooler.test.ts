// The store through a real PgBouncer in transaction mode (pooler: 'transaction'): concurrent
// callers on new keys (what named statements and the `options` startup parameter broke), and a
// completion that fails after the work ran: retried within the lease when the failure was the
// pooler's or the connection's, else reported with the key, never left silently to a takeover.
import { randomBytes, randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { runnable, storeConnections, useTestDatabase } from '../helpers/database';
import { hasPgBouncer, pgBouncerPrepares, preparedPgBouncerPath, startPgBouncer } from '../helpers/pgbouncer';
import { createTestStore, jsonResult, newResponseKey, principal, sleep, testPolicy } from '../helpers/store';
import { createRetrysafe, type IdempotentCall } from '@retrysafe/store';
import { plannerSettingsInPlace } from '@retrysafe/store/postgres';
import pg from 'pg';

const pooled = storeConnections.filter((connection) => connection.pooler && runnable(connection));

describe.each(pooled)('store through PgBouncer ($name)', ({ layout, pooler: viaPooler }) => {
  const pooler = viaPooler || 'transaction';
  const db = useTestDatabase(layout, { pooler });
  const bouncer = () => {
    if (!db.pgbouncer) throw new Error('no PgBouncer started');
    return db.pgbouncer;
  };

  const call = (principalId: string, key: string, mode: IdempotentCall['mode'], work: IdempotentCall['work'], leaseMs = testPolicy.leaseMs): IdempotentCall => ({
    principalId,
    key,
    endpoint: 'POST /pooled',
    method: 'POST',
    body: { amount: 5 },
    policy: { ...testPolicy, leaseMs },
    mode,
    work,
  });

  it.each(['claim-first', 'transactional'] as const)('8 callers on new keys, %s: every call answered, the work run once per key', async (mode) => {
    const { store } = createTestStore(mode === 'transactional' ? db.storePool : db.pool, { layout, pooler });
    const p = principal();
    let runs = 0;
    let answers = 0;
    const errors: unknown[] = [];
    const until = Date.now() + 1_000;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (Date.now() < until) {
          try {
            await store.execute(
              call(p, randomUUID(), mode, () => {
                runs += 1;
                return Promise.resolve(jsonResult(201, { ok: true }));
              }),
            );
            answers += 1;
          } catch (error) {
            errors.push(error);
          }
        }
      }),
    );
    expect(errors).toEqual([]);
    expect(answers).toBeGreaterThan(8);
    expect(runs).toBe(answers);
    const { rows } = await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM idempotency_keys WHERE principal_id = $1 AND state = 'completed'", [p]);
    expect(rows[0]?.n).toBe(answers);
  });

  it('retries a completion the pooler failed (restarted while the work ran) within the lease, and records it', async () => {
    const unrecorded: string[] = [];
    const { store } = createTestStore(db.pool, { layout, pooler, onCompletionFailed: (_error, id) => unrecorded.push(id.key) });
    const p = principal();
    let runs = 0;
    let restarted: Promise<void> = Promise.resolve();
    const answer = await store.execute(
      call(p, 'k', 'claim-first', async () => {
        runs += 1;
        // The pooler goes down as the work ends, and is back 300 ms later: the completion meets it down.
        await bouncer().down();
        restarted = sleep(300).then(() => bouncer().up());
        return jsonResult(201, { ok: true });
      }),
    );
    await restarted;
    expect(answer.status).toBe(201);
    expect(runs).toBe(1);
    expect(store.completionRetries).toBeGreaterThanOrEqual(1);
    expect(store.unrecordedCompletions).toBe(0);
    expect(unrecorded).toEqual([]);
    const replay = await store.execute(call(p, 'k', 'claim-first', () => Promise.reject(new Error('must not run'))));
    expect(replay.replayed).toBe(true);
  });

  it('waits out a PAUSE of the pooler during the completion, and records it', async () => {
    const { store } = createTestStore(db.pool, { layout, pooler });
    const p = principal();
    let paused: Promise<void> = Promise.resolve();
    const running = store.execute(
      call(p, 'k', 'claim-first', () => {
        paused = bouncer().pause();
        return Promise.resolve(jsonResult(201, { ok: true }));
      }),
    );
    await sleep(300);
    await paused;
    await bouncer().resume();
    expect((await running).status).toBe(201);
    const { rows } = await db.pool.query<{ state: string }>('SELECT state FROM idempotency_keys WHERE principal_id = $1', [p]);
    expect(rows).toEqual([{ state: 'completed' }]);
  });

  it('reports, with the key, a completion it could not record before the lease ends', async () => {
    const unrecorded: string[] = [];
    const { store } = createTestStore(db.pool, { layout, pooler, onCompletionFailed: (_error, id) => unrecorded.push(id.key) });
    const p = principal();
    const leaseMs = 1_500;
    let runs = 0;
    const failed = await store
      .execute(
        call(p, 'lost', 'claim-first', async () => {
          runs += 1;
          // Down for longer than the lease: the completion cannot land in time.
          await bouncer().down();
          setTimeout(() => void bouncer().up(), leaseMs + 500);
          return jsonResult(201, { ok: true });
        }, leaseMs),
      )
      .catch((error: unknown) => error);
    expect(failed).toBeInstanceOf(Error);
    expect(runs).toBe(1);
    expect(unrecorded).toEqual(['lost']);
    expect(store.unrecordedCompletions).toBe(1);
    await sleep(leaseMs + 1_000);
  });

  it('names its statements only where the pooler tracks them (transaction-prepared), never through one that passes names on', async () => {
    const names: (string | undefined)[] = [];
    const pool = new pg.Pool({ connectionString: bouncer().url(), max: 2, pipeline: true });
    pool.on('error', () => undefined);
    pool.on('acquire', (client) => {
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
        const config = args[0];
        if (typeof config === 'object' && config !== null && 'text' in config) names.push((config as { name?: string }).name);
        return query(...args);
      };
    });
    try {
      const { store } = createTestStore(pool, { layout, pooler });
      for (const key of ['n1', 'n2', 'n3']) await store.execute(call(principal(), key, 'claim-first', () => Promise.resolve(jsonResult(201, { ok: true }))));
      // Claim and completion of three keys, each run to an answer on whichever server connection the pooler gave.
      expect(names.length).toBeGreaterThanOrEqual(6);
      if (pooler === 'transaction-prepared') expect(names.every((name) => typeof name === 'string' && name.startsWith('retrysafe_'))).toBe(true);
      else expect(names.every((name) => name === undefined)).toBe(true);
    } finally {
      await pool.end();
    }
  });

  it('sends each statement in a transaction with SET LOCAL, or alone where the role or database has the settings', async () => {
    // Statements sent by the store's pool's connections, per claim-first request on a new key.
    const sent = { count: 0 };
    const counted = new WeakSet<object>();
    const pool = new pg.Pool({ connectionString: bouncer().url(), max: 4, pipeline: true });
    pool.on('error', () => undefined);
    pool.on('acquire', (client) => {
      if (counted.has(client)) return;
      counted.add(client);
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
        sent.count += 1;
        return query(...args);
      };
    });
    const perRequest = async (inPlace: boolean) => {
      const { store } = createTestStore(pool, { layout, pooler, plannerSettingsInPlace: inPlace });
      const before = sent.count;
      await store.execute(call(principal(), 'k', 'claim-first', () => Promise.resolve(jsonResult(201, { ok: true }))));
      return sent.count - before;
    };
    try {
      expect(await plannerSettingsInPlace(pool)).toBe(false);
      // The claim and the completion, each BEGIN; SET LOCAL ..., the statement, COMMIT.
      expect(await perRequest(false)).toBe(6);
      const admin = new pg.Client({ connectionString: db.url });
      await admin.connect();
      try {
        const name = new URL(db.url).pathname.slice(1);
        await admin.query(`ALTER DATABASE ${name} SET enable_seqscan = off`);
        await bouncer().restart(); // new server connections, with the database's settings
        expect(await plannerSettingsInPlace(pool)).toBe(true);
        expect(await perRequest(true)).toBe(2);
        await admin.query(`ALTER DATABASE ${name} RESET enable_seqscan`);
      } finally {
        await admin.end();
      }
      await bouncer().restart();
    } finally {
      await pool.end();
    }
  });
});

describe.skipIf(!hasPgBouncer)("createRetrysafe's pooler: 'transaction-prepared'", () => {
  const db = useTestDatabase();
  const options = { service: 'orders', fingerprintSecret: randomBytes(32), responseKeys: [newResponseKey()], metricsFlushIntervalMs: 3_600_000, quota: false as const };

  it('refuses a pooler that passes named statements through (PgBouncer before 1.21, or max_prepared_statements = 0), naming the setting', async () => {
    // Debian 12's PgBouncer (1.18) knows no max_prepared_statements; a later one is told 0.
    const passing = await startPgBouncer({ upstreamUrl: db.url, poolSize: 4, ...(pgBouncerPrepares ? { maxPreparedStatements: 0 } : {}) });
    try {
      await expect(createRetrysafe({ ...options, connectionString: passing.url(), pooler: 'transaction-prepared' })).rejects.toThrow(
        /^pooler: 'transaction-prepared' refused: the connection passes named statements through .*set max_prepared_statements .*or use the 'transaction' pooler mode/,
      );
      // The same pooler in the mode it supports starts.
      const started = await createRetrysafe({ ...options, connectionString: passing.url(), pooler: 'transaction' });
      await started.stop();
    } finally {
      await passing.stop();
    }
  });

  it('refuses a direct connection in that mode too (it is no pooler at all)', async () => {
    await expect(createRetrysafe({ ...options, connectionString: db.url, pooler: 'transaction-prepared' })).rejects.toThrow(/passes named statements through/);
  });

  it.skipIf(!preparedPgBouncerPath)('starts through a PgBouncer that tracks them, and serves requests on named statements', async () => {
    const tracking = await startPgBouncer({ upstreamUrl: db.url, poolSize: 4, binary: preparedPgBouncerPath, maxPreparedStatements: 200 });
    try {
      const retrysafe = await createRetrysafe({ ...options, connectionString: tracking.url(), pooler: 'transaction-prepared' });
      try {
        const p = principal();
        const work = () => Promise.resolve(jsonResult(201, { id: 'order-1' }));
        const first = await retrysafe.store.execute({ principalId: p, key: 'k', endpoint: 'POST /orders', method: 'POST', body: { amount: 5 }, policy: testPolicy, mode: 'claim-first', work });
        const again = await retrysafe.store.execute({ principalId: p, key: 'k', endpoint: 'POST /orders', method: 'POST', body: { amount: 5 }, policy: testPolicy, mode: 'claim-first', work });
        expect(first.replayed).toBe(false);
        expect(again.replayed).toBe(true);
        expect(again.body.equals(first.body)).toBe(true);
      } finally {
        await retrysafe.stop();
      }
    } finally {
      await tracking.stop();
    }
  });
});
