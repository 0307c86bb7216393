// The retention review of one service: its policies, their history and the sweeper's evidence
// about its keys only (rows deleted its own), read through the dashboard's role; a service no
// policy names is refused by name, not shown as an empty review.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensurePolicies } from '../../server/retention/policies';
import { readRetentionReview, readSweepEvidence, UnknownServiceError } from '../../server/retention/review';
import { useTestDatabase } from '../helpers/database';

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
    const review = await readRetentionReview(dashboard, 'billing');
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
    const review = await readRetentionReview(dashboard);
    expect(review.service).toBeNull();
    expect(review.policies.filter((policy) => policy.endpoint === ENDPOINT).map((policy) => policy.service)).toEqual(['billing', 'orders']);
    expect(review.sweeps.slice(0, 3).map((run) => run.rowsDeleted)).toEqual([5, 3, 7]);
    expect(review.sweeps[2]?.scopes.map((scope) => scope.service)).toEqual(['billing', 'orders']);
  });

  it("limits one service's evidence to its own runs, however many others came after", async () => {
    const runs = await readSweepEvidence(dashboard, 1, 'orders');
    expect(runs.map((run) => [run.rowsDeleted, run.staleReleased])).toEqual([[5, 1]]);
  });

  it('refuses a service no policy names', async () => {
    await expect(readRetentionReview(dashboard, 'nobody')).rejects.toBeInstanceOf(UnknownServiceError);
    await expect(readRetentionReview(dashboard, 'nobody')).rejects.toMatchObject({ code: 'UNKNOWN_SERVICE' });
  });
});
