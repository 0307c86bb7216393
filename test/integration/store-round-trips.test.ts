// The fewest round trips: every statement the store sends is counted on the wire.
//   claim-first  new key: claim + completion = 2; replay: 1 (the claim reads the row).
//   transactional new key: BEGIN/SET LOCAL + claim + work + completion + COMMIT = 4 + work;
//                replay: BEGIN/SET LOCAL + claim + ROLLBACK = 3.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotentCall } from '../../server/idempotency/store';
import { layouts, useTestDatabase } from '../helpers/database';
import { createTestStore, jsonResult, principal, testPolicy } from '../helpers/store';

describe.each(layouts)('store round trips (%s layout)', (layout) => {
  const db = useTestDatabase(layout);
  let pool: pg.Pool;
  let sent = 0;

  beforeAll(() => {
    pool = new pg.Pool({ connectionString: db.url, max: 4 });
    pool.on('connect', (client) => {
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
        sent += 1;
        return query(...args);
      };
    });
  });
  afterAll(async () => {
    await pool.end();
  });

  const counted = async (run: () => Promise<unknown>) => {
    const before = sent;
    await run();
    return sent - before;
  };

  const call = (p: string, mode: IdempotentCall['mode']): IdempotentCall => ({
    principalId: p,
    key: 'k',
    endpoint: 'POST /x',
    method: 'POST',
    body: { a: 1 },
    policy: testPolicy,
    mode,
    work: () => Promise.resolve(jsonResult(201, { ok: true })),
  });

  it('claim-first: 2 for a new key, 1 for a replay', async () => {
    const { store } = createTestStore(pool, { layout });
    const p = principal();
    expect(await counted(() => store.execute(call(p, 'claim-first')))).toBe(2);
    expect(await counted(() => store.execute(call(p, 'claim-first')))).toBe(1);
  });

  it('transactional: 4 plus the work for a new key, 3 for a replay', async () => {
    const { store } = createTestStore(pool, { layout });
    const p = principal();
    const withWork: IdempotentCall = {
      ...call(p, 'transactional'),
      work: async ({ db: tx }) => {
        await tx.query('SELECT 1');
        return jsonResult(201, {});
      },
    };
    expect(await counted(() => store.execute(withWork))).toBe(5);
    expect(await counted(() => store.execute(withWork))).toBe(3);
  });
});
