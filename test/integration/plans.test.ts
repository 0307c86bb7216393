// The statements around the request path (quota, authentication, stale claims, sweeper,
// monitoring, dashboard reads) are served by an index, proven by EXPLAIN on a table large
// enough for the planner to prefer a sequential scan if it could, for both the custom and the
// generic plan. The request path itself: request-path-plans.test.ts.
import { randomBytes, randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { staleClaimTexts } from '../../server/retention/stale-claims';
import { sweepChunkText } from '../../server/retention/sweeper';
import { explainPrepared as explain, recordingQueryable, type PlanNode } from '../../packages/store/test/helpers/plan';
import { readAlertInputs } from '../../server/metrics/alerts';
import { overviewQuery, readOverview, readOverviewEvents } from '../../server/metrics/overview';
import { readBaseline } from '../../server/metrics/sampler';
import { readLatestScopeFigures, sampleScopeFigures } from '../../server/metrics/scope-sample';
import { readStoreFigures } from '../../server/metrics/store-figures';
import { useTestDatabase } from '../helpers/database';
import { PostgresKeyReads, principalKeysStatement } from '@retrysafe/store/postgres';
import { ensurePolicies } from '../../server/retention/policies';
import { DEMO_SERVICE, defaultPolicyFields } from '../../server/demo/policies';

const ROWS = 200_000;
const BIG_PRINCIPAL = '00000000-0000-0000-0000-0000000b1600';

/** The nodes from `root` down to the first node matching `match`, both included (empty if none). */
function pathTo(root: PlanNode | undefined, match: (node: PlanNode) => boolean): PlanNode[] {
  if (!root) return [];
  if (match(root)) return [root];
  for (const child of root.Plans ?? []) {
    const below = pathTo(child, match);
    if (below.length > 0) return [root, ...below];
  }
  return [];
}

describe('hot-path plans', () => {
  const db = useTestDatabase();
  const principalId = randomUUID();
  const scope = 'POST /api/v1/payments';

  beforeAll(async () => {
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, response_status,
         response_content_type, response_body, response_key_id, completed_at, expires_at, created_at)
       SELECT ('00000000-0000-0000-0000-' || lpad((i % 1000)::text, 12, '0'))::uuid, CASE WHEN i % 4 = 0 THEN 'orders' ELSE 'demo' END, $1, 'key-' || i, 'completed',
              decode(md5(i::text) || md5(i::text), 'hex'), gen_random_uuid(), 201, 'application/json', '\\x00'::bytea, 'k1',
              now(), now() + (i % 86400) * interval '1 second', now() - interval '1 hour' + i * interval '10 milliseconds'
       FROM generate_series(1, $2::int) AS i`,
      [scope, ROWS],
    );
    // One large tenant among the many small ones: its keys are what a page must not read whole.
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, response_status,
         response_content_type, response_ref, completed_at, expires_at, created_at)
       SELECT $1, 'demo', $2, 'big-' || i, CASE WHEN i % 100 = 0 THEN 'failed' ELSE 'completed' END, decode(md5(i::text) || md5(i::text), 'hex'),
              gen_random_uuid(), 201, 'application/json', 'ref', now(), now() + interval '1 day', now() - interval '1 hour' + i * interval '1 millisecond'
       FROM generate_series(1, 50000) AS i`,
      [BIG_PRINCIPAL, scope],
    );
    // A realistic sprinkle of running and crashed claim-first attempts.
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
       SELECT gen_random_uuid(), 'demo', $1, 'running-' || i, 'in_progress', decode(md5(i::text) || md5(i::text), 'hex'), gen_random_uuid(),
              now() + (i % 60 - 30) * interval '1 second', now() + interval '1 day'
       FROM generate_series(1, 2000) AS i`,
      [scope],
    );
    await db.pool.query(
      `INSERT INTO idempotency_key_usage (principal_id, service, scope, bucket_start, instance_id, claims)
       SELECT ('00000000-0000-0000-0000-' || lpad((i % 1000)::text, 12, '0'))::uuid, CASE WHEN i % 4 = 0 THEN 'orders' ELSE 'demo' END, $1,
              date_trunc('hour', now()) - (i / 1000) * interval '1 hour', gen_random_uuid(), 10
       FROM generate_series(1, 50000) AS i`,
      [scope],
    );
    await db.pool.query(
      `INSERT INTO tenants (name, api_key_hash) SELECT 'tenant ' || i, sha256(i::text::bytea) FROM generate_series(1, 20000) AS i`,
    );
    await db.pool.query('ANALYZE idempotency_keys; ANALYZE idempotency_key_usage; ANALYZE tenants');
  });

  it('reads quota totals through the usage primary key', async () => {
    const client = await db.pool.connect();
    try {
      // The quota's refresh (packages/store/src/quota.ts), one service's totals.
      const text = `SELECT u.principal_id, u.scope, (extract(epoch FROM u.bucket_start) * 1000)::bigint AS bucket_ms, sum(u.claims) AS claims
        FROM idempotency_key_usage u
        JOIN unnest($1::uuid[], $2::text[]) AS t(principal_id, scope) ON u.principal_id = t.principal_id AND u.service = $4 AND u.scope = t.scope
        WHERE u.bucket_start > now() - $3::bigint * interval '1 millisecond'
        GROUP BY 1, 2, 3`;
      const plan = await explain(client, text, [[principalId], [scope], 93_600_000, 'demo'], 'force_generic_plan');
      expect(plan.some((node) => node['Index Name'] === 'idempotency_key_usage_pkey')).toBe(true);
      expect(plan.filter((node) => node['Node Type'] === 'Seq Scan')).toEqual([]);
    } finally {
      client.release();
    }
  });

  it('authenticates an API key through the unique index on its hash', async () => {
    const client = await db.pool.connect();
    try {
      const plan = await explain(
        client,
        'SELECT id, permissions FROM tenants WHERE api_key_hash = $1 AND revoked_at IS NULL',
        [randomBytes(32)],
        'force_generic_plan',
      );
      expect(plan.some((node) => node['Index Name'] === 'tenants_api_key_hash_key')).toBe(true);
    } finally {
      client.release();
    }
  });

  it.each([
    ['counting stale claims', staleClaimTexts.count, [0]],
    ['releasing stale claims', staleClaimTexts.release, [1000, 0]],
  ])('finds stale claims through the partial index when %s', async (_name, text, values) => {
    const client = await db.pool.connect();
    try {
      const plan = await explain(client, text, values, 'force_generic_plan');
      expect(plan.some((node) => node['Index Name'] === 'idempotency_keys_stale_lease_idx')).toBe(true);
      expect(plan.filter((node) => node['Node Type'] === 'Seq Scan')).toEqual([]);
    } finally {
      client.release();
    }
  });

  it('sweeps a chunk through the expires_at index and deletes by ctid', async () => {
    const client = await db.pool.connect();
    try {
      const text = sweepChunkText;
      const plan = await explain(client, text, [1000], 'force_generic_plan');
      expect(plan.some((node) => node['Index Name'] === 'idempotency_keys_expiry_idx')).toBe(true);
      expect(plan.some((node) => node['Node Type'] === 'Tid Scan')).toBe(true);
      expect(plan.filter((node) => node['Node Type'] === 'Seq Scan')).toEqual([]);
    } finally {
      client.release();
    }
  });

  // Monitoring reads are several statements each: record them, then check every statement's
  // plan. None may scan the key table; the per-scope figures read it only by a page sample.
  it('serves every monitoring statement without scanning the key table', async () => {
    const recorded = recordingQueryable(db.pool);
    const figures = await readStoreFigures(recorded.db);
    await readBaseline(recorded.db);
    await sampleScopeFigures(recorded.db, figures.tableBytes);
    await readAlertInputs(recorded.db);
    for (const range of ['1h', '30d'] as const) await readOverview(recorded.db, overviewQuery.parse({ range, scope }));
    await readLatestScopeFigures(recorded.db);
    const texts = recorded.statements.filter((statement) => !/^(BEGIN|COMMIT|ROLLBACK)$/.test(statement.text.trim()));
    expect(texts.length).toBeGreaterThan(10);
    const client = await db.pool.connect();
    try {
      for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
        for (const statement of texts) {
          const plan: PlanNode[] = await explain(client, statement.text, statement.values, mode);
          const onKeys = plan.filter((node) => node['Relation Name']?.startsWith('idempotency_keys'));
          const wholeScans = onKeys.filter((node) => node['Node Type'] === 'Seq Scan');
          expect({ statement: statement.text, wholeScans }).toEqual({ statement: statement.text, wholeScans: [] });
          if (onKeys.some((node) => node['Node Type'] === 'Sample Scan')) expect(statement.text).toMatch(/TABLESAMPLE SYSTEM/);
        }
      }
    } finally {
      client.release();
    }
  });

  // The overview's events: a year of sweep runs a minute apart (a few failed) and a long policy
  // history, read for an hour a day ago, a month ending now, and one service's hour.
  it('reads the overview events by index scans under a limit', async () => {
    await db.pool.query(
      `INSERT INTO sweep_runs (trigger, status, started_at, finished_at)
       SELECT 'schedule', CASE WHEN i % 5000 = 0 THEN 'failed' ELSE 'completed' END, now() - (200000 - i) * interval '1 minute', now() - (200000 - i) * interval '1 minute'
       FROM generate_series(1, 200000) AS i;
       INSERT INTO store_stats (sampled_at, estimated_rows, baseline_rows, table_bytes, index_bytes, toast_bytes, cleanup_lag_seconds, stale_claims, last_sweep_run_id)
       SELECT date_trunc('minute', now()) - i * interval '1 minute', 1, 1, 1, 1, 0, 0, 0, (SELECT max(id) FROM sweep_runs) - i
       FROM generate_series(1, 50000) AS i;
       INSERT INTO endpoint_policy_history (service, endpoint, version, changed_at, changed_by, reason, previous, current)
       SELECT CASE WHEN i % 2 = 0 THEN 'orders' ELSE 'demo' END, 'POST /e' || (i % 50), i, now() - (20000 - i) * interval '10 minutes', 'test', 'r', '{}', '{}'
       FROM generate_series(1, 20000) AS i;
       INSERT INTO endpoint_policies (service, endpoint, scope_mode, retry_window_seconds, retention_seconds, lease_ms, lock_timeout_ms, max_response_bytes, live_key_quota, updated_by)
       SELECT DISTINCT CASE WHEN i % 2 = 0 THEN 'orders' ELSE 'demo' END, 'POST /e' || (i % 50), 'endpoint', 86400, 93600, 30000, 5000, 4096, 100000, 'test' FROM generate_series(1, 100) AS i;
       ANALYZE sweep_runs; ANALYZE store_stats; ANALYZE endpoint_policy_history; ANALYZE endpoint_policies;`,
    );
    const recorded = recordingQueryable(db.pool);
    const hour = 3_600_000;
    await readOverviewEvents(recorded.db, { from: new Date(Date.now() - 25 * hour), to: new Date(Date.now() - 24 * hour), service: null, scope: null });
    await readOverviewEvents(recorded.db, { from: new Date(Date.now() - 720 * hour), to: new Date(), service: null, scope: null });
    await readOverviewEvents(recorded.db, { from: new Date(Date.now() - hour), to: new Date(), service: 'orders', scope: 'POST /e1' });
    // The server's own (alert history, instance starts): server-events-plans.test.ts.
    const storeStatements = recorded.statements.filter((statement) => !statement.text.includes('retrysafe_server.') && !statement.text.includes('retrysafe.service_starts'));
    expect(storeStatements).toHaveLength(6);
    const client = await db.pool.connect();
    try {
      for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
        for (const statement of storeStatements) {
          const plan: PlanNode[] = await explain(client, statement.text, statement.values, mode);
          // The history and the runs by an index (one endpoint's history may be read by a bitmap of
          // it); the policies (one row per endpoint) as the planner likes.
          const served: Record<string, string> = { endpoint_policy_history: 'endpoint_policy_history_endpoint_idx', sweep_runs: 'sweep_runs_pkey', store_stats: 'store_stats_pkey' };
          const scans = plan.filter((node) => node['Relation Name'] !== undefined && node['Relation Name'] !== 'endpoint_policies');
          const indexes = plan.map((node) => node['Index Name']);
          const byIndex = (type: string | undefined) => (type === 'Index Scan' || type === 'Index Only Scan' || type === 'Bitmap Heap Scan' ? 'by an index' : type);
          expect({ mode, statement: statement.text, scans: scans.map((node) => [node['Relation Name'], byIndex(node['Node Type'])]) }).toEqual({
            mode,
            statement: statement.text,
            scans: scans.map((node) => [node['Relation Name'], 'by an index']),
          });
          for (const scan of scans) expect(indexes).toContain(served[scan['Relation Name'] ?? '']);
          expect(plan[0]?.['Node Type']).toBe('Limit');
        }
      }
    } finally {
      client.release();
    }
  });

  it('serves the dashboard key lookup by primary-key probes and the stale list by the partial index', async () => {
    await ensurePolicies(db.pool, DEMO_SERVICE, defaultPolicyFields, 'test');
    await ensurePolicies(db.pool, 'orders', defaultPolicyFields, 'test');
    const recorded = recordingQueryable(db.pool);
    // Every service's records, and one service's.
    const reads = new PostgresKeyReads(recorded.db);
    await reads.keyRecords({ principalId: '00000000-0000-0000-0000-000000000001', key: 'key-1' });
    await reads.keyRecords({ principalId: '00000000-0000-0000-0000-000000000004', key: 'key-4', service: 'orders' });
    await reads.staleClaims(100);
    await reads.staleClaims(100, 'orders');
    const [lookup, lookupOne, stale, staleOfOne] = recorded.statements;
    if (!lookup || !lookupOne || !stale || !staleOfOne) throw new Error('statements not recorded');
    expect(lookup.text).not.toMatch(/response_body/);
    const client = await db.pool.connect();
    try {
      for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
        for (const statement of [lookup, lookupOne]) {
          const lookupPlan = await explain(client, statement.text, statement.values, mode);
          const keyScans = lookupPlan.filter((node) => node['Relation Name'] === 'idempotency_keys');
          expect(keyScans.length).toBeGreaterThan(0);
          for (const keyScan of keyScans) expect(keyScan['Index Name']).toBe('idempotency_keys_pkey');
        }
        for (const statement of [stale, staleOfOne]) {
          const stalePlan = await explain(client, statement.text, statement.values, mode);
          expect(stalePlan.some((node) => node['Index Name'] === 'idempotency_keys_stale_lease_idx')).toBe(true);
        }
        const cursor = { createdAtMicros: String((Date.now() - 600_000) * 1000), service: 'demo', scope, key: 'big-1' };
        for (const list of [
          { principalId: BIG_PRINCIPAL, reason: 'x', limit: 50 },
          { principalId: BIG_PRINCIPAL, reason: 'x', limit: 50, state: 'failed' as const, scope, after: cursor },
          { principalId: '00000000-0000-0000-0000-000000000001', reason: 'x', limit: 50 },
          { principalId: '00000000-0000-0000-0000-000000000001', reason: 'x', limit: 50, state: 'completed' as const, scope, after: cursor },
          { principalId: BIG_PRINCIPAL, reason: 'x', limit: 50, service: 'demo', after: cursor },
        ]) {
          const statement = principalKeysStatement(list);
          // Unnamed, so Postgres plans it with this principal's own statistics on every call.
          expect(statement).not.toHaveProperty('name');
          const listPlan = await explain(client, statement.text, statement.values, mode);
          const scans = listPlan.filter((node) => node['Relation Name'] === 'idempotency_keys');
          expect(scans.filter((node) => node['Node Type'] === 'Seq Scan')).toEqual([]);
          expect(listPlan.some((node) => node['Index Name'] === 'idempotency_keys_principal_created_idx')).toBe(true);
          // A principal of a few hundred keys may be read whole by a bitmap scan and sorted:
          // cheap, and the planner's call. A large one, planned with its own statistics, is
          // read in index order under the bound: between the scan and the nearest Limit there is
          // at most an Incremental Sort (ordering ties of one created_at), and nothing above
          // re-sorts what it read, so the page streams out and stops when full.
          if (list.principalId !== BIG_PRINCIPAL || mode !== 'force_custom_plan') continue;
          expect(scans.map((node) => [node['Node Type'], node['Index Name']])).toEqual([['Index Scan', 'idempotency_keys_principal_created_idx']]);
          const path = pathTo(listPlan[0], (node) => node['Relation Name'] === 'idempotency_keys');
          const above = path.slice(0, -1).reverse().map((node) => node['Node Type']);
          expect(above.slice(0, above.indexOf('Limit') + 1)).toSatisfy((types: string[]) => types.at(-1) === 'Limit' && types.slice(0, -1).every((type) => type === 'Incremental Sort'));
          expect(listPlan.filter((node) => node['Node Type'] === 'Sort')).toEqual([]);
        }
      }
    } finally {
      client.release();
    }
  });
});
