// The dashboard's read of one service's principals with quota counters in its retention window
// (principalsWithLiveKeys: the stale claims of a service whose keys are in a Redis Cluster, read
// each minute) is served by idempotency_key_usage_service_bucket_idx (migration 0030), proven by
// EXPLAIN in custom and generic plan mode on a new, never-analyzed table and on one of 10 M
// counters (20 services, 100,000 principals, 100 hour buckets each), analyzed.
import { describe, expect, it } from 'vitest';
import { principalsWithLiveKeys } from '../../src/key-scopes';
import { useTestDatabase } from '../helpers/database';
import { explainPrepared as explain, recordingQueryable, type PlanNode } from '../helpers/plan';

describe('quota counters: the principals of a service, plans', () => {
  const db = useTestDatabase();

  async function expectServed() {
    const recorded = recordingQueryable(db.pool);
    await principalsWithLiveKeys(recorded.db, 'orders', 1_000);
    expect(recorded.statements).toHaveLength(1);
    const [statement] = recorded.statements;
    if (!statement) throw new Error('no statement recorded');
    const client = await db.pool.connect();
    try {
      for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
        const plan: PlanNode[] = await explain(client, statement.text, statement.values, mode);
        const counters = plan.filter((node) => node['Relation Name'] === 'idempotency_key_usage');
        // One scan of the counters, through the index (a bitmap heap scan names it on its bitmap index scan).
        expect({ mode, scans: counters.map((node) => node['Node Type']) }).toEqual({ mode, scans: [expect.stringMatching(/^(Index Scan|Index Only Scan|Bitmap Heap Scan)$/)] });
        expect(plan.some((node) => node['Index Name'] === 'idempotency_key_usage_service_bucket_idx'), mode).toBe(true);
      }
    } finally {
      client.release();
    }
  }

  it('reads the service-and-bucket index on a new, never-analyzed table', async () => {
    await expectServed();
  });

  it('reads the service-and-bucket index at 10 M counters, analyzed', async () => {
    // The service's policy: a day's retention, so the window is the last 25 hours of 100.
    await db.pool.query(`INSERT INTO retrysafe.endpoint_policies
      (service, endpoint, scope_mode, retry_window_seconds, retention_seconds, lease_ms, lock_timeout_ms, max_response_bytes, live_key_quota, updated_by)
      VALUES ('orders', 'POST /orders', 'endpoint', 86400, 86400, 30000, 2000, 65536, 10000, 'plan test')`);
    // 100,000 principals (a twentieth of them the service's), each with 100 hour buckets, in
    // primary-key order: 10 M counters.
    await db.pool.query(
      `INSERT INTO retrysafe.idempotency_key_usage (principal_id, service, scope, bucket_start, instance_id, claims)
       SELECT p.id, p.service, 'POST /orders', date_trunc('hour', now()) - b * interval '1 hour', '00000000-0000-0000-0000-000000000001'::uuid, 1 + b % 7
       FROM (SELECT ('00000000-0000-0000-0000-' || lpad(i::text, 12, '0'))::uuid AS id, CASE WHEN i % 20 = 0 THEN 'orders' ELSE 's' || (i % 20) END AS service
             FROM generate_series(0, 99999) AS i) p
       CROSS JOIN generate_series(0, 99) AS b
       ORDER BY p.id, b;
       ANALYZE retrysafe.idempotency_key_usage;`,
    );
    await expectServed();
  }, 600_000);
});
