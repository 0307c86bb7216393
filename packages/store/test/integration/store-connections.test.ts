// How many pooled connections a request holds, and when. Transactional mode checks out one
// connection for the read of a committed row and the transaction after it (one checkout, not
// two); a replay lets it go before answering, so a re-derivation on the pool finds one free.
// Claim-first holds none across the endpoint's work: with every connection of the pool in use by
// requests, a work that queries the pool still gets one. Proven on pools of one connection, where
// holding a connection one moment too long would wait forever.
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { STORE_POOL_SETTINGS } from '@retrysafe/store/postgres';
import { FingerprintMismatchError, type IdempotentCall } from '@retrysafe/store';
import { jsonResult } from '@retrysafe/store';
import { layouts, useTestDatabase } from '../helpers/database';
import { createTestStore, principal, simpleCall as call, testPolicy } from '../helpers/store';

describe.each(layouts)('store connections (%s layout)', (layout) => {
  const db = useTestDatabase(layout);
  const pools: pg.Pool[] = [];
  // A connection a test leaked would keep end() waiting: fail in seconds, not at the hook timeout.
  afterEach(async () => {
    await Promise.all(pools.splice(0).map((pool) => pool.end()));
  }, 10_000);

  /** A store pool of `max` connections (the store's settings), counting checkouts; waiting for one fails after 3 s. */
  const storePool = (max: number) => {
    const pool = new pg.Pool({ connectionString: db.url, max, connectionTimeoutMillis: 3_000, ...STORE_POOL_SETTINGS });
    pools.push(pool);
    const counts = { checkouts: 0 };
    pool.on('acquire', () => {
      counts.checkouts += 1;
    });
    return { pool, counts };
  };


  it('transactional: a new key takes one checkout for its read and its transaction; a replay one for its read', async () => {
    const { pool, counts } = storePool(2);
    const { store } = createTestStore(pool, { layout });
    const p = principal();
    const work: IdempotentCall['work'] = async ({ db: tx }) => {
      await tx.query('SELECT 1');
      return jsonResult(201, { ok: true });
    };
    expect((await store.execute(call(p, 'transactional', { work }))).replayed).toBe(false);
    expect(counts.checkouts).toBe(1);
    expect((await store.execute(call(p, 'transactional', { work }))).replayed).toBe(true);
    expect(counts.checkouts).toBe(2);
    expect(pool.idleCount).toBe(pool.totalCount);
  });

  it('transactional: a replay stored as a reference re-derives on the pool, whose only connection the read has let go', async () => {
    const { pool } = storePool(1);
    const { store } = createTestStore(pool, { layout });
    const p = principal();
    const big = Buffer.alloc(testPolicy.maxResponseBytes + 1, 'x');
    const over = call(p, 'transactional', {
      work: () => Promise.resolve({ status: 201, contentType: 'text/plain', body: big, reference: 'ref-1' }),
      rederive: async (reference, queryable) => {
        const { rows } = await queryable.query<{ body: string }>('SELECT repeat($1::text, $2::int) AS body', ['x', big.length]);
        expect(reference).toBe('ref-1');
        return Buffer.from(rows[0]?.body ?? '');
      },
    });
    await store.execute(over);
    const replay = await store.execute(over);
    expect(replay.replayed).toBe(true);
    expect(replay.body.equals(big)).toBe(true);
  });

  it('transactional: a mismatch answered from the read gives its connection back', async () => {
    const { pool } = storePool(1);
    const { store } = createTestStore(pool, { layout });
    const p = principal();
    await store.execute(call(p, 'transactional'));
    await expect(store.execute(call(p, 'transactional', { body: { a: 2 } }))).rejects.toBeInstanceOf(FingerprintMismatchError);
    expect((await store.execute(call(p, 'transactional'))).replayed).toBe(true);
    expect(pool.idleCount).toBe(1);
  });

  it('claim-first holds no connection across the work: requests on every connection of the pool, each work querying the pool, all finish', async () => {
    const { pool } = storePool(2);
    const { store } = createTestStore(pool, { layout });
    const p = principal();
    // Each work starts only once all four have claimed (the claims have each had a connection and
    // let it go), then queries the pool: a claim that held its connection would leave none.
    let claimed = 0;
    let allClaimed: () => void = () => undefined;
    const together = new Promise<void>((done) => (allClaimed = done));
    const outcomes = await Promise.all(
      ['a', 'b', 'c', 'd'].map((key) =>
        store.execute(
          call(p, 'claim-first', {
            key,
            work: async ({ db: queryable }) => {
              claimed += 1;
              if (claimed === 4) allClaimed();
              await together;
              const { rows } = await queryable.query<{ n: number }>('SELECT 1 AS n');
              return jsonResult(201, { n: rows[0]?.n });
            },
          }),
        ),
      ),
    );
    expect(outcomes.map((outcome) => outcome.status)).toEqual([201, 201, 201, 201]);
    expect(pool.idleCount).toBe(pool.totalCount);
  });
});
