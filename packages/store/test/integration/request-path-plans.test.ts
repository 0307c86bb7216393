// Every request-path statement reaches the key table through the primary key only, whatever
// the statistics say: on a freshly migrated, never-analyzed table (every new install, and in the
// partitioned layout every new day partition), on one analyzed when tiny and grown since, and on
// a large analyzed one beside partitions created after the ANALYZE (the empty ones analyzed as
// such, which invite a sequential scan); in custom and in generic
// plan mode (a named statement settles on the generic plan after five runs and keeps it on its
// connection). The 10-million-row case is in `npm run bench -- lifecycle`.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, layouts, type StoreLayout } from '../helpers/database';
import { checkRequestPathPlans, type PlanFinding } from '../helpers/request-path-plans';
import { POOLER_TRANSACTION_SETTINGS, storePoolSettings } from '@retrysafe/store/postgres';

const SCOPE = 'POST /api/v1/payments';
const BIG_PRINCIPAL = '00000000-0000-0000-0000-0000000b1600';
const id = { principalId: BIG_PRINCIPAL, service: 'demo', scope: SCOPE, key: 'big-7' };

/** `rows` keys: half of them one principal's (what an index on principal_id would read whole), a mix of states and of two services. */
async function insertKeys(pool: pg.Pool, rows: number, offset: number): Promise<void> {
  await pool.query(
    `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at,
       response_status, response_content_type, response_ref, completed_at, expires_at, created_at)
     SELECT CASE WHEN i % 2 = 0 THEN ('00000000-0000-0000-0000-' || lpad((i % 997)::text, 12, '0'))::uuid ELSE $1::uuid END,
            CASE WHEN i % 5 = 0 THEN 'orders' ELSE 'demo' END, $2, 'big-' || i,
            CASE WHEN i % 3 = 1 THEN 'in_progress' WHEN i % 3 = 2 THEN 'failed' ELSE 'completed' END,
            decode(md5(i::text) || md5(i::text), 'hex'), gen_random_uuid(),
            CASE WHEN i % 3 = 1 THEN now() + (i % 60 - 30) * interval '1 second' END,
            CASE WHEN i % 3 = 0 THEN 201 END, CASE WHEN i % 3 = 0 THEN 'application/json' END, CASE WHEN i % 3 = 0 THEN 'ref' END,
            CASE WHEN i % 3 = 0 THEN now() END,
            now() + interval '1 hour' + (i % 86400) * interval '1 second', now() - (i % 3600) * interval '1 second'
     FROM generate_series($3::int, $3::int + $4::int - 1) AS i`,
    [BIG_PRINCIPAL, SCOPE, offset, rows],
  );
}

/** The key table and, in the partitioned layout, each partition: autovacuum off, so the statistics stay as the test left them. */
async function freezeStatistics(pool: pg.Pool): Promise<void> {
  const { rows } = await pool.query<{ name: string }>(
    `SELECT c.oid::regclass::text AS name FROM pg_class c
     WHERE c.oid = 'idempotency_keys'::regclass AND c.relkind = 'r'
        OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'idempotency_keys'::regclass)`,
  );
  for (const { name } of rows) await pool.query(`ALTER TABLE ${name} SET (autovacuum_enabled = false)`);
}

const states: Record<string, (pool: pg.Pool) => Promise<void>> = {
  'freshly migrated, never analyzed': () => Promise.resolve(),
  // What a plan made then (and cached by a named statement) would carry into production.
  'analyzed at 12 rows': async (pool) => {
    await freezeStatistics(pool);
    await insertKeys(pool, 12, 1);
    await pool.query('ANALYZE idempotency_keys');
  },
  'analyzed at 12 rows, grown to 60,000 since': async (pool) => {
    await freezeStatistics(pool);
    await insertKeys(pool, 12, 1);
    await pool.query('ANALYZE idempotency_keys');
    await insertKeys(pool, 60_000, 13);
  },
  'large and analyzed, with partitions created since': async (pool) => {
    await insertKeys(pool, 200_000, 1);
    await pool.query('ANALYZE idempotency_keys');
    // New day partitions, empty and never analyzed, beside the analyzed ones (no-op when plain).
    await pool.query('SELECT retrysafe_ensure_partitions(20)');
  },
};

const connections = [
  { name: 'direct', pooler: false },
  // createRetrysafe({ pooler: 'transaction' }): no startup parameters, unnamed statements (a
  // custom plan at each execution), each in a transaction that opens with
  // POOLER_TRANSACTION_SETTINGS (SET LOCAL: here set on the explaining connection, whose helpers
  // open their own transactions). Without it the custom plans of a table analyzed when tiny,
  // and the partitioned claim function's cached plans, scan sequentially (measured).
  { name: 'through a transaction-mode pooler', pooler: true },
];

describe.each(layouts)('request-path plans, %s layout', (layout: StoreLayout) => {
  describe.each(connections.flatMap((connection) => Object.keys(states).map((state) => ({ connection, state }))))('$connection.name, $state', ({ connection, state }) => {
    let database: Awaited<ReturnType<typeof createTestDatabase>>;
    let pool: pg.Pool;
    let findings: PlanFinding[];

    beforeAll(async () => {
      database = await createTestDatabase({ layout });
      // As the store's pool connects (storePoolSettings: session options direct, none through a
      // pooler; pipelined both ways, so the SET below goes out ahead of the connection's first
      // statement, not beside it).
      pool = new pg.Pool({ connectionString: database.url, max: 2, ...storePoolSettings(connection.pooler ? 'transaction' : undefined) });
      if (connection.pooler) pool.on('connect', (client) => void client.query(POOLER_TRANSACTION_SETTINGS.replace('SET LOCAL', 'SET')));
      await states[state]?.(pool);
      findings = await checkRequestPathPlans(pool, layout, id, { pooler: connection.pooler });
    }, 120_000);
    afterAll(async () => {
      await pool.end();
      await database.drop();
    });

    it('reaches the key table through the primary key only, in custom and generic plans', () => {
      expect(findings.length).toBeGreaterThanOrEqual(connection.pooler ? 7 : 12);
      const off = findings.filter((finding) => finding.offPrimaryKey.length > 0);
      expect(off, JSON.stringify(off, null, 2)).toEqual([]);
      for (const finding of findings) expect(finding.scans.some((scan) => scan.includes('_pkey')), finding.statement).toBe(true);
    });
  });
});
