// The fewest round trips: every statement the store sends is counted on the wire, and so is
// every flight (a statement sent while nothing else is pending on its connection; statements
// pipelined behind it share its round trip). On the store's pool (STORE_POOL_SETTINGS):
//   claim-first  new key: claim + completion = 2 flights; replay: 1 (the claim reads the row).
//   transactional new key: a read of the committed row (none), BEGIN/SET LOCAL with the claim
//                (1 flight), the work, the completion with the COMMIT (1 flight) = 3 + work;
//                replay: the read = 1, no transaction at all.
// On a pool without pipelining, a new transactional key takes one flight more.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { STORE_POOL_SETTINGS } from '@retrysafe/store/postgres';
import { KeyInUseError } from '@retrysafe/store';
import type { IdempotentCall } from '@retrysafe/store';
import { layouts, useTestDatabase } from '../helpers/database';
import { createTestStore, jsonResult, principal, simpleCall as call, testPolicy } from '../helpers/store';

describe.each(layouts)('store round trips (%s layout)', (layout) => {
  const db = useTestDatabase(layout);
  const wire = { statements: 0, flights: 0 };
  let storePool: pg.Pool;
  let plainPool: pg.Pool;

  const counting = (pool: pg.Pool) => {
    pool.on('connect', (client) => {
      let pending = 0;
      const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown> | undefined;
      (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
        wire.statements += 1;
        if (pending === 0) wire.flights += 1;
        pending += 1;
        const settled = () => {
          pending -= 1;
        };
        // pool.query passes a callback; everything else awaits the promise.
        const callback = args.at(-1);
        if (typeof callback === 'function') {
          args[args.length - 1] = (...results: unknown[]) => {
            settled();
            (callback as (...results: unknown[]) => void)(...results);
          };
          return query(...args);
        }
        const result = query(...args);
        void result?.then(settled, settled);
        return result;
      };
    });
    return pool;
  };

  beforeAll(() => {
    storePool = counting(new pg.Pool({ connectionString: db.url, max: 4, ...STORE_POOL_SETTINGS }));
    plainPool = counting(new pg.Pool({ connectionString: db.url, max: 4 }));
  });
  afterAll(async () => {
    await storePool.end();
    await plainPool.end();
  });

  const counted = async (run: () => Promise<unknown>) => {
    const before = { ...wire };
    await run();
    return { statements: wire.statements - before.statements, flights: wire.flights - before.flights };
  };


  it('claim-first: 2 for a new key, 1 for a replay', async () => {
    const { store } = createTestStore(storePool, { layout });
    const p = principal();
    expect(await counted(() => store.execute(call(p, 'claim-first')))).toEqual({ statements: 2, flights: 2 });
    expect(await counted(() => store.execute(call(p, 'claim-first')))).toEqual({ statements: 1, flights: 1 });
  });

  it('through a transaction pooler, each statement in a transaction of its own: BEGIN, it and COMMIT in one flight when pipelined, one at a time otherwise', async () => {
    const p = principal();
    const pipelined = createTestStore(storePool, { layout, pooler: 'transaction' }).store;
    // claim-first new key: the claim and the completion, each as BEGIN, the statement, COMMIT.
    expect(await counted(() => pipelined.execute(call(p, 'claim-first')))).toEqual({ statements: 6, flights: 2 });
    // A pool opened without the store's settings: never a second statement sent while one is
    // pending on its connection (node-postgres 8 queues it with a deprecation warning; 9 refuses).
    const plain = createTestStore(plainPool, { layout, pooler: 'transaction' }).store;
    expect(await counted(() => plain.execute(call(principal(), 'claim-first')))).toEqual({ statements: 6, flights: 6 });
  });

  const withWork = (p: string): IdempotentCall => ({
    ...call(p, 'transactional'),
    work: async ({ db: tx }) => {
      await tx.query('SELECT 1');
      return jsonResult(201, {});
    },
  });

  it('transactional: BEGIN and the claim in one flight, the completion and COMMIT in another; a replay is one read, with no transaction', async () => {
    const { store } = createTestStore(storePool, { layout });
    const p = principal();
    expect(await counted(() => store.execute(withWork(p)))).toEqual({ statements: 6, flights: 4 });
    expect(await counted(() => store.execute(withWork(p)))).toEqual({ statements: 1, flights: 1 });
  });

  it('transactional on a pool without pipelining: the same statements, one flight each', async () => {
    const { store } = createTestStore(plainPool, { layout });
    const p = principal();
    expect(await counted(() => store.execute(withWork(p)))).toEqual({ statements: 6, flights: 6 });
    expect(await counted(() => store.execute(withWork(p)))).toEqual({ statements: 1, flights: 1 });
  });

  it('transactional: a duplicate of a running request reads, claims inside its transaction, waits out the lock timeout and rolls back: 409', async () => {
    const { store } = createTestStore(storePool, { layout });
    const p = principal();
    let release: () => void = () => undefined;
    const held = new Promise<void>((done) => (release = done));
    let working: () => void = () => undefined;
    const claimed = new Promise<void>((done) => (working = done));
    const slow: IdempotentCall = { ...withWork(p), policy: { ...testPolicy, lockTimeoutMs: 50 }, work: async () => { working(); await held; return jsonResult(201, {}); } };
    const first = store.execute(slow);
    // The first holds its claim once its work runs: counting starts after its own statements.
    await claimed;
    // The duplicate finds no committed row, claims inside its transaction, waits out the lock timeout: 409.
    let duplicate: unknown;
    const counts = await counted(async () => {
      duplicate = await store.execute(slow).catch((error: unknown) => error);
    });
    release();
    await first;
    expect(duplicate).toBeInstanceOf(KeyInUseError);
    expect(counts).toEqual({ statements: 4, flights: 3 });
  });

  it('many duplicates at once, each ending its transaction without waiting, leave every connection clean', async () => {
    const { store } = createTestStore(storePool, { layout });
    const p = principal();
    let release: () => void = () => undefined;
    const held = new Promise<void>((done) => (release = done));
    let working: () => void = () => undefined;
    const claimed = new Promise<void>((done) => (working = done));
    const slow: IdempotentCall = { ...withWork(p), policy: { ...testPolicy, lockTimeoutMs: 30 }, work: async () => { working(); await held; return jsonResult(201, {}); } };
    const first = store.execute(slow);
    await claimed;
    // 40 duplicates on the 3 other connections of a pool of 4: each claims inside a transaction,
    // times out on the running one's row and answers 409 before its ROLLBACK is through; the next
    // BEGIN on that connection queues behind the ROLLBACK. One handed out mid-transaction would fail.
    const duplicates = await Promise.all(Array.from({ length: 40 }, () => store.execute(slow).then(() => 'answered', (error: unknown) => (error instanceof KeyInUseError ? 409 : error))));
    release();
    await first;
    expect(duplicates.every((answer) => answer === 409)).toBe(true);
    const replays = await Promise.all(Array.from({ length: 20 }, () => store.execute(slow)));
    expect(replays.every((outcome) => outcome.replayed)).toBe(true);
    const { rows } = await storePool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'");
    expect(rows[0]?.n).toBe(0);
  });
});
