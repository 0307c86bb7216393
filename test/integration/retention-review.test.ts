// The retention review of one service: its policies, their history and the sweeper's evidence
// about its keys only (rows deleted its own), read through the dashboard's role; a service no
// policy names is refused by name, not shown as an empty review.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { changePolicy, ensurePolicies } from '../../server/retention/policies';
import { exportRetention } from '../../server/retention/export';
import { readRetentionReview, readSweepEvidence, UnknownServiceError } from '../../server/retention/review';
import { useTestDatabase } from '../helpers/database';

const CAPACITY_SETTINGS = { databaseMemoryBytes: undefined, indexOverMemoryShare: 0.8 };

const ENDPOINT = 'POST /api/review-test';
const fields = { scopeMode: 'endpoint' as const, retryWindowSeconds: 600, retentionSeconds: 1_200, leaseMs: 10_000, lockTimeoutMs: 1_000, maxResponseBytes: 1_024, liveKeyQuota: 1_000 };

describe('retention review per service', () => {
  const db = useTestDatabase();
  let dashboard: pg.Pool;

  beforeAll(async () => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 2 });
    await ensurePolicies(db.pool, 'billing', { [ENDPOINT]: fields }, 'system');
    await ensurePolicies(db.pool, 'orders', { [ENDPOINT]: { ...fields, retentionSeconds: 2_400 } }, 'system');
    // Three runs: one deleted keys of both services, one of billing only, one of orders only.
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO sweep_runs (trigger, status, started_at, finished_at, rows_deleted, stale_released)
       SELECT 'interval', 'completed', now() - make_interval(mins => n), now() - make_interval(mins => n), d, s
       FROM (VALUES (30, 7, 2), (20, 3, 0), (10, 5, 1)) AS v(n, d, s) ORDER BY n DESC RETURNING id`,
    );
    const [both, billingOnly, ordersOnly] = rows.map((row) => row.id);
    await db.pool.query(
      `INSERT INTO sweep_run_scopes (run_id, service, scope, rows_deleted, min_age_seconds, retry_window_seconds, min_margin_seconds)
       VALUES ($1, 'billing', $4, 4, 1300, 600, 700), ($1, 'orders', $4, 3, 2500, 600, 1900),
              ($2, 'billing', $4, 3, 1250, 600, 650), ($3, 'orders', $4, 5, 2450, 600, 1850)`,
      [both, billingOnly, ordersOnly, ENDPOINT],
    );
  });
  afterAll(async () => {
    await dashboard.end();
  });

  it("shows one service's policies, history and evidence, its rows deleted only", async () => {
    const review = await readRetentionReview(dashboard, 'billing', CAPACITY_SETTINGS);
    expect(review.service).toBe('billing');
    expect(review.services).toEqual(expect.arrayContaining(['billing', 'orders']));
    expect(review.policies.map((policy) => [policy.service, policy.endpoint])).toEqual([['billing', ENDPOINT]]);
    expect(review.policies[0]).toMatchObject({ evidenceRowsDeleted: 7, evidenceMinMarginSeconds: 650, keepsPromise: true });
    expect(new Set(review.history.map((entry) => entry.service))).toEqual(new Set(['billing']));
    // Newest first: the billing-only run, then the shared one with its billing scope alone.
    expect(review.sweeps.map((run) => ({ deleted: run.rowsDeleted, scopes: run.scopes.map((scope) => scope.service) }))).toEqual([
      { deleted: 3, scopes: ['billing'] },
      { deleted: 4, scopes: ['billing'] },
    ]);
  });

  it('shows every service when none is asked for, with the runs as they were', async () => {
    const review = await readRetentionReview(dashboard, undefined, CAPACITY_SETTINGS);
    expect(review.service).toBeNull();
    expect(review.policies.filter((policy) => policy.endpoint === ENDPOINT).map((policy) => policy.service)).toEqual(['billing', 'orders']);
    expect(review.sweeps.slice(0, 3).map((run) => run.rowsDeleted)).toEqual([5, 3, 7]);
    expect(review.sweeps[2]?.scopes.map((scope) => scope.service)).toEqual(['billing', 'orders']);
  });

  it('carries capacity: the key table against memory, from the catalog, with the operator\'s memory figure (#33 point 4)', async () => {
    const { rows } = await db.pool.query<{ bytes: string }>(
      `SELECT coalesce(sum(pg_relation_size(x.indexrelid)), 0)::bigint AS bytes FROM pg_index x
       WHERE x.indisunique AND x.indrelid IN (SELECT 'idempotency_keys'::regclass UNION ALL SELECT inhrelid FROM pg_inherits WHERE inhparent = 'idempotency_keys'::regclass)`,
    );
    const stated = await readRetentionReview(dashboard, 'billing', { databaseMemoryBytes: 4 * 1024 ** 3, indexOverMemoryShare: 0.7 });
    expect(stated.capacity).toMatchObject({ indexBytes: Number(rows[0]?.bytes), memoryBytes: 4 * 1024 ** 3, memorySource: 'DATABASE_MEMORY_BYTES', thresholdShare: 0.7 });
    expect(stated.capacity.heapBytes).toBeGreaterThanOrEqual(0);
    const unstated = await readRetentionReview(dashboard, undefined, CAPACITY_SETTINGS);
    expect(unstated.capacity.memorySource).toBe('shared_buffers');
    expect(unstated.capacity.memoryBytes).toBe(unstated.capacity.sharedBuffersBytes);
    expect(unstated.capacity.memoryBytes).toBeGreaterThan(0);
  });

  it("limits one service's evidence to its own runs, however many others came after", async () => {
    const runs = await readSweepEvidence(dashboard, 1, 'orders');
    expect(runs.map((run) => [run.rowsDeleted, run.staleReleased])).toEqual([[5, 1]]);
  });

  it('refuses a service no policy names', async () => {
    await expect(readRetentionReview(dashboard, 'nobody', CAPACITY_SETTINGS)).rejects.toBeInstanceOf(UnknownServiceError);
    await expect(readRetentionReview(dashboard, 'nobody', CAPACITY_SETTINGS)).rejects.toMatchObject({ code: 'UNKNOWN_SERVICE' });
  });

  it('exports the history in the page\'s words and units, naming the fields each change made', async () => {
    await changePolicy(db.pool, { service: 'orders', endpoint: ENDPOINT, fields: { ...fields, retentionSeconds: 7_200, leaseMs: 60_000 }, actor: 'compliance@example.com', reason: 'longer audits', expectedVersion: 1 });
    const csv = await exportRetention({ read: dashboard, write: dashboard }, 'compliance@example.com', 'history', 'orders');
    const [header, ...rows] = csv.trim().split(/\r?\n/);
    expect(header).toBe('id,service,endpoint,version,changed_at,changed_by,reason,breaking,acknowledged,changed_fields,change,previous,current');
    // Newest first: the change, then the creation.
    expect(rows[0]).toContain(',Retention; Lease,"retention 40 min → 2 h, lease 10 s → 1 min",');
    expect(rows[0]).toContain('Retention 40 min;');
    expect(rows[0]).toContain('Retention 2 h;');
    expect(rows[0]).toContain('Largest stored response 1 KiB');
    expect(rows[1]).toContain(',all (created),created,,');
    expect(csv).not.toMatch(/retentionSeconds|93600|7200/);
    const { rows: audited } = await db.pool.query("SELECT target FROM audit_log WHERE action = 'retention.export' AND actor = 'compliance@example.com'");
    expect(audited).toEqual([{ target: { what: 'history', service: 'orders' } }]);
  });

  it('exports the store against its baseline over a range, a sample per step, the baseline named in the header', async () => {
    // Samples two hours and five minutes ago (the same step: the later one is kept), one an hour ago, and one two days ago (outside 24 h).
    await db.pool.query(
      `INSERT INTO store_stats (sampled_at, estimated_rows, baseline_rows, table_bytes, index_bytes, toast_bytes, oldest_row_age_seconds, cleanup_lag_seconds, stale_claims)
       VALUES (date_bin('15 minutes', now() - interval '2 hours', 'epoch') + interval '1 minute', 900, 1000, 8192, 4096, 0, 3600, 30, 0),
              (date_bin('15 minutes', now() - interval '2 hours', 'epoch') + interval '2 minutes', 1500, 1000, 16384, 8192, 1024, 3660, 90, 2),
              (now() - interval '1 hour', 2000, 1000, 16384, 8192, 2048, NULL, 60, 1),
              (now() - interval '2 days', 5, 5, 1, 1, 1, 1, 1, 0)`,
    );
    const csv = await exportRetention({ read: dashboard, write: dashboard }, 'compliance@example.com', 'store', undefined, '24h');
    const [header, ...rows] = csv.trim().split(/\r?\n/);
    expect(header).toBe(
      'sampled_at,estimated_rows,baseline_rows (new keys within each scope\'s trailing retention: claim rate x retention; partitioned layout and a retention of a day or more: from the start of the current partition less the retention),rows_to_baseline,table_bytes,index_bytes,toast_bytes,total_bytes,oldest_row_age_seconds,cleanup_lag_seconds (the oldest row past its expiry; partitioned layout: the oldest partition past its end or the walk of keys promised less than a day if longer),stale_claims',
    );
    expect(rows.map((row) => row.split(',').slice(1).join(','))).toEqual(['1500,1000,1.5,16384,8192,1024,25600,3660,90,2', '2000,1000,2,16384,8192,2048,26624,,60,1']);
    const { rows: audited } = await db.pool.query("SELECT target FROM audit_log WHERE action = 'retention.export' AND target->>'what' = 'store'");
    expect(audited).toEqual([{ target: { what: 'store', range: '24h' } }]);
  });
});
