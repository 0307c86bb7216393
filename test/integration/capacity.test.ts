// Capacity (server/metrics/capacity.ts): the key table's heap and unique index against the
// database's memory, the bytes per key and the steady state, checked against a table of known
// size in both layouts; the check that pends, then fires, when the index is over 80 % of memory;
// the overview's `capacity` as the dashboard's role reads it, with no key, fingerprint or body in
// it; and its statements served by the catalog and primary keys, never a scan.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { explainPrepared, recordingQueryable, type PlanNode } from '../../packages/store/test/helpers/plan';
import { alertThresholds, evaluateAlertStates, readAlertInputs } from '../../server/metrics/alerts';
import { readCapacity, readIndexMemory } from '../../server/metrics/capacity';
import { evaluateChecks } from '../../server/metrics/checks';
import { overviewQuery, readOverview } from '../../server/metrics/overview';
import { ensurePolicies } from '../../server/retention/policies';
import { useTestDatabase, layouts } from '../helpers/database';

const SERVICE = 'orders';
const SCOPE = 'POST /orders';
const ROWS = 20_000;
const RETENTION_SECONDS = 7_200;

async function seed(pool: pg.Pool, keys = ROWS): Promise<void> {
  await ensurePolicies(
    pool,
    SERVICE,
    { [SCOPE]: { scopeMode: 'endpoint', retryWindowSeconds: 3_600, retentionSeconds: RETENTION_SECONDS, leaseMs: 10_000, lockTimeoutMs: 1_000, maxResponseBytes: 4_096, liveKeyQuota: 1_000_000 } },
    'system',
  );
  await pool.query('SELECT retrysafe.retrysafe_ensure_partitions()');
  await pool.query(
    `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, response_status, response_content_type,
       response_body, response_key_id, completed_at, created_at, expires_at)
     SELECT ('00000000-0000-0000-0000-' || lpad((i % 100)::text, 12, '0'))::uuid, $1, $2, 'capacity-key-' || i, 'completed',
            decode(md5(i::text) || md5(i::text), 'hex'), gen_random_uuid(), 201, 'application/json',
            convert_to('capacity-body-' || i, 'UTF8'), 'k1', now(), now(), now() + interval '1 hour' + (i % 3600) * interval '1 second'
     FROM generate_series(1, $3::int) AS i`,
    [SERVICE, SCOPE, keys],
  );
  await pool.query('ANALYZE idempotency_keys');
  // New keys: 10 a minute over the last hour (1 a 6 s), and other outcomes that are not new keys.
  await pool.query(
    `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
     SELECT date_trunc('minute', now()) - m * interval '1 minute', $1, $2, o, CASE WHEN o = 'new' THEN 10 ELSE 50 END
     FROM generate_series(0, 59) AS m, unnest(ARRAY['new', 'replay']) AS o`,
    [SERVICE, SCOPE],
  );
}

/** The sizes measured independently: every leaf of the key table and each leaf's primary key. */
async function measured(pool: pg.Pool): Promise<{ heap: number; unique: number; all: number }> {
  const { rows } = await pool.query<{ heap: string; unique: string; all: string }>(
    `WITH leaves AS (SELECT relid FROM pg_partition_tree('idempotency_keys') WHERE isleaf
                     UNION SELECT 'idempotency_keys'::regclass WHERE (SELECT relkind FROM pg_class WHERE oid = 'idempotency_keys'::regclass) = 'r')
     SELECT sum(pg_relation_size(relid)) AS heap, sum(pg_indexes_size(relid)) AS all,
            (SELECT sum(pg_relation_size(c.conindid)) FROM pg_constraint c JOIN leaves l ON c.conrelid = l.relid WHERE c.contype = 'p') AS unique
     FROM leaves`,
  );
  return { heap: Number(rows[0]?.heap), unique: Number(rows[0]?.unique), all: Number(rows[0]?.all) };
}

describe.each(layouts)('capacity, %s layout', (layout) => {
  const db = useTestDatabase(layout);
  let dashboard: pg.Pool;

  beforeAll(async () => {
    await seed(db.pool);
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 8 });
  });
  afterAll(async () => {
    await dashboard.end();
  });

  it('measures the heap, the unique index and the bytes per key of a table of known size, against shared_buffers or DATABASE_MEMORY_BYTES', async () => {
    const sizes = await measured(db.pool);
    expect(sizes.heap).toBeGreaterThan(ROWS * 100);
    const { rows: buffers } = await db.pool.query<{ bytes: string }>("SELECT pg_size_bytes(current_setting('shared_buffers')) AS bytes");
    const capacity = await readCapacity(dashboard, { service: SERVICE });
    expect(capacity.heapBytes).toBe(sizes.heap);
    expect(capacity.indexBytes).toBe(sizes.unique);
    expect(capacity.indexBytes).toBeLessThan(sizes.all);
    expect(capacity.memorySource).toBe('shared_buffers');
    expect(capacity.memoryBytes).toBe(Number(buffers[0]?.bytes));
    // ANALYZE's estimate of 20,000 rows, within a page's worth.
    expect(Math.abs(capacity.rows - ROWS)).toBeLessThan(ROWS * 0.02);
    expect(capacity.bytesPerKey).toBeCloseTo((sizes.heap + sizes.unique) / capacity.rows, 6);
    expect(capacity.indexShareOfMemory).toBeCloseTo(sizes.unique / Number(buffers[0]?.bytes), 9);
    // 600 new keys in the last hour, kept 2 h: 1,200 rows at the steady state, at the measured index bytes per key.
    // The same in the partitioned layout: a key promised less than a day is the sweeper's to delete
    // within a sweep of its expiry there too (a key promised longer stays until its partition
    // ends, and peaks a day higher: test/integration/partitions.test.ts).
    expect(capacity.newKeysPerSecond).toBeCloseTo(600 / 3_600, 2);
    const steady = (600 / 3_600) * RETENTION_SECONDS;
    expect(capacity.steadyStateRows).toBeGreaterThan(steady * 0.96);
    expect(capacity.steadyStateRows).toBeLessThan(steady * 1.04);
    expect(capacity.steadyStateIndexBytes).toBe(Math.round(capacity.steadyStateRows * (sizes.unique / capacity.rows)));
    // Another service has no flow: nothing at its steady state.
    expect((await readCapacity(dashboard, { service: 'billing' })).steadyStateRows).toBe(0);
    const told = await readCapacity(dashboard, { service: SERVICE, databaseMemoryBytes: 8 * 1024 ** 3 });
    expect(told).toMatchObject({ memoryBytes: 8 * 1024 ** 3, memorySource: 'DATABASE_MEMORY_BYTES', indexBytes: sizes.unique });
  });

  it('pends when the unique index is over 80% of memory, and fires once it has been for 30 min', async () => {
    const sizes = await measured(db.pool);
    // A database whose memory the index fills to 90%.
    const memoryBytes = Math.floor(sizes.unique / 0.9);
    const now = await readAlertInputs(dashboard, { databaseMemoryBytes: memoryBytes });
    const pending = evaluateAlertStates(now, alertThresholds);
    expect(pending.firing.map((alert) => alert.name)).not.toContain('index_over_memory');
    expect(pending.pending.find((alert) => alert.name === 'index_over_memory')).toMatchObject({ storeWide: true, forMinutes: 30 });
    expect(evaluateChecks(now, pending.firing, alertThresholds, {}, pending.pending).find((check) => check.name === 'index_over_memory')).toMatchObject({ state: 'pending', link: 'store' });
    // Not over 80% with twice the memory: ok.
    const roomy = await readAlertInputs(dashboard, { databaseMemoryBytes: memoryBytes * 2 });
    const ok = evaluateAlertStates(roomy, alertThresholds);
    expect([...ok.firing, ...ok.pending].map((alert) => alert.name)).not.toContain('index_over_memory');
    expect(evaluateChecks(roomy, ok.firing, alertThresholds, {}, ok.pending).find((check) => check.name === 'index_over_memory')).toMatchObject({ state: 'ok' });

    // Store samples of the last 35 minutes whose indexes were this size: over for the rule's 30 min.
    await db.pool.query(
      `INSERT INTO store_stats (sampled_at, estimated_rows, baseline_rows, table_bytes, index_bytes, toast_bytes, cleanup_lag_seconds, stale_claims)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', $1, 0, $2, $3, 0, 0, 0 FROM generate_series(0, 35) AS m`,
      [ROWS, sizes.heap, sizes.all],
    );
    try {
      const held = await readAlertInputs(dashboard, { databaseMemoryBytes: memoryBytes });
      const firing = evaluateAlertStates(held, alertThresholds);
      const alert = firing.firing.find((candidate) => candidate.name === 'index_over_memory');
      expect(alert?.summary).toMatch(/unique index is 90% of the database's memory \(DATABASE_MEMORY_BYTES\), over 80% for 30 min/);
      expect(evaluateChecks(held, firing.firing, alertThresholds, {}, firing.pending).find((check) => check.name === 'index_over_memory')).toMatchObject({ state: 'firing' });
    } finally {
      await db.pool.query('DELETE FROM store_stats');
    }
  });

  it("the overview's capacity, as the dashboard's role reads it: the contract's fields, and no key, fingerprint or body", async () => {
    const overview = await readOverview(dashboard, overviewQuery.parse({ range: '1h', service: SERVICE }), alertThresholds, 60, { databaseMemoryBytes: 4 * 1024 ** 3 });
    const json = JSON.parse(JSON.stringify(overview)) as { capacity: Record<string, unknown> };
    for (const field of ['heapBytes', 'indexBytes', 'memoryBytes', 'bytesPerKey', 'steadyStateRows', 'steadyStateIndexBytes']) {
      expect(typeof json.capacity[field], field).toBe('number');
    }
    expect(json.capacity.memoryBytes).toBe(4 * 1024 ** 3);
    const text = JSON.stringify(json);
    const { rows } = await db.pool.query<{ key: string; fingerprint: string; body: string; principal_id: string }>(
      "SELECT key, encode(fingerprint, 'hex') AS fingerprint, convert_from(response_body, 'UTF8') AS body, principal_id FROM idempotency_keys ORDER BY key LIMIT 3",
    );
    for (const row of rows) {
      for (const secret of [row.key, row.fingerprint, row.fingerprint.slice(0, 16), row.body, row.principal_id]) expect(text).not.toContain(secret);
    }
    expect(text).not.toMatch(/capacity-key-|capacity-body-/);
  });

  it('reads the key table through the catalog and the metrics tables through their primary keys: no sequential scan, custom or generic plan', async () => {
    // Enough flow and samples for the planner to care: two days of minutes over 40 scopes.
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
       SELECT date_trunc('minute', now()) - interval '2 hours' - m * interval '1 minute', $1, 'POST /scope-' || s, 'new', 1
       FROM generate_series(0, 2880) AS m, generate_series(1, 40) AS s;
       INSERT INTO store_stats (sampled_at, estimated_rows, baseline_rows, table_bytes, index_bytes, toast_bytes, cleanup_lag_seconds, stale_claims)
       SELECT date_trunc('minute', now()) - interval '3 days' - m * interval '1 minute', 1, 0, 1, 1, 0, 0, 0 FROM generate_series(0, 20000) AS m;
       ANALYZE flow_counts_minute; ANALYZE store_stats`.replace('$1', `'${SERVICE}'`),
    );
    const recorded = recordingQueryable(dashboard);
    await readCapacity(recorded.db, { service: SERVICE });
    await readCapacity(recorded.db, {});
    await readIndexMemory(recorded.db);
    expect(recorded.statements.length).toBeGreaterThanOrEqual(6);
    const client = await db.pool.connect();
    try {
      for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
        for (const statement of recorded.statements) {
          const plan: PlanNode[] = await explainPrepared(client, statement.text, statement.values, mode);
          // The tables that grow with traffic and time (endpoint_policies holds a row per endpoint, read whole as the baseline reads it).
          const scans = plan.filter((node) => node['Node Type'] === 'Seq Scan' && /^(idempotency_keys|flow_counts_minute|store_stats)/.test(node['Relation Name'] ?? ''));
          expect({ statement: statement.text, mode, scans }).toEqual({ statement: statement.text, mode, scans: [] });
        }
      }
    } finally {
      client.release();
    }
  });
});

describe('capacity of a young table', () => {
  const db = useTestDatabase();

  it('measures no bytes per key (nor a steady state in bytes) from a handful of keys, whose pages are mostly fixed overhead', async () => {
    await seed(db.pool, 5);
    const capacity = await readCapacity(db.pool, { service: SERVICE });
    expect(capacity.rows).toBeLessThan(10);
    expect(capacity.steadyStateRows).toBeGreaterThan(1_000);
    expect(capacity).toMatchObject({ bytesPerKey: null, indexBytesPerKey: null, steadyStateIndexBytes: null, steadyStateBytes: null });
  });
});
