// The overview's checks (#15 points 5, 6, 7, 8): each firing alert with its value against its
// threshold, its scope and where to act; the passed checks with their current values; stale
// claims of the chosen scope; the unfinished step's rate over the time it has run; and the
// names the URL may carry. Read through the dashboard's role, as the page reads them.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { overviewQuery, readOverview } from '../../server/metrics/overview';
import { knownOverviewNames } from '../../server/metrics/overview-names';
import { rebuildSeries } from '../../server/metrics/series';
import { correctOverviewSearch } from '../../components/overview/search-params';
import { awaitStepRoom } from '../helpers/clock';
import { useTestDatabase } from '../helpers/database';

describe('overview checks', () => {
  const db = useTestDatabase();
  let dashboard: pg.Pool;
  beforeAll(async () => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 2 });
    // Seven minutes of refunds at 40% conflicts beside payments at five times the rate, clean.
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', 'demo', s, o, c
       FROM generate_series(1, 7) AS m, (VALUES ('POST /api/v1/refunds', 'new', 60), ('POST /api/v1/refunds', 'conflict', 40),
                                              ('POST /api/v1/payments', 'new', 450), ('POST /api/v1/payments', 'replay', 50)) AS t(s, o, c);
       INSERT INTO endpoint_policies (service, endpoint, scope_mode, retry_window_seconds, retention_seconds, lease_ms, lock_timeout_ms, max_response_bytes, live_key_quota, updated_by)
       VALUES ('demo', 'POST /api/v1/payments', 'endpoint', 86400, 93600, 30000, 5000, 4096, 100000, 'test'),
              ('demo', 'POST /api/v1/refunds', 'endpoint', 86400, 100800, 30000, 5000, 4096, 100000, 'test');
       INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
       VALUES (gen_random_uuid(), 'demo', 'POST /api/v1/refunds', 'crashed-1', 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), now() - interval '3 minutes', now() + interval '1 day')`,
    );
    await rebuildSeries(db.pool);
  });
  afterAll(async () => {
    await dashboard.end();
  });

  it("names the scope, the value against the threshold, since when and where to act; lists what passed with its value", async () => {
    const refunds = await readOverview(dashboard, overviewQuery.parse({ range: '1h', service: 'demo', scope: 'POST /api/v1/refunds' }));
    const conflict = refunds.checks.find((check) => check.name === 'conflict_rate');
    expect(conflict).toMatchObject({ firing: true, service: 'demo', scope: 'POST /api/v1/refunds', storeWide: false, value: '40%', threshold: 'over 10% for 5 min', link: 'principals' });
    expect(conflict?.since?.getTime()).toBeLessThan(Date.now() - 4 * 60_000);
    // Firing first; every other rule passed, with a value.
    expect(refunds.checks[0]?.firing).toBe(true);
    const passed = refunds.checks.filter((check) => !check.firing);
    expect(passed.map((check) => check.name).sort()).toEqual(['claim_p99', 'cleanup_lag', 'index_over_memory', 'mismatch_rate', 'rejection_rate', 'retention_below_window', 'rows_over_baseline', 'stale_claims', 'sweeper_stalled', 'unrecorded_completions']);
    expect(passed.find((check) => check.name === 'unrecorded_completions')).toMatchObject({ service: 'demo', scope: null, storeWide: false, value: 'none in the last hour', threshold: 'any in the last hour', link: 'unrecorded' });
    expect(passed.find((check) => check.name === 'mismatch_rate')).toMatchObject({ value: '0%', scope: 'POST /api/v1/refunds', storeWide: false });
    expect(passed.find((check) => check.name === 'index_over_memory')).toMatchObject({ storeWide: true, state: 'ok', link: 'store', threshold: 'over 80% of memory for 30 min' });
    expect(passed.find((check) => check.name === 'retention_below_window')).toMatchObject({ storeWide: true, value: 'smallest margin 2 h (POST /api/v1/payments, demo)', link: 'retention' });
    // The stale claim is the refunds scope's, not the payments scope's.
    expect(refunds.staleClaims.count).toBe(1);
    expect(refunds.staleClaims.oldestPastLeaseSeconds).toBeGreaterThan(170);
    const payments = await readOverview(dashboard, overviewQuery.parse({ range: '1h', service: 'demo', scope: 'POST /api/v1/payments' }));
    expect(payments.checks.find((check) => check.name === 'conflict_rate')).toMatchObject({ firing: false, value: '0%' });
    expect(payments.staleClaims).toEqual({ count: 0, oldestPastLeaseSeconds: null });
    // All scopes: the refunds alert still names its scope.
    const all = await readOverview(dashboard, overviewQuery.parse({ range: '1h' }));
    expect(all.checks.filter((check) => check.firing).map((check) => [check.name, check.scope])).toEqual([['conflict_rate', 'POST /api/v1/refunds']]);
    expect(all.objectives).toEqual({ claimP99Ms: 50, conflictShare: 0.1, mismatchShare: 0.05, rowsOverBaselineRatio: 1.25 });
    expect(new Date(all.dataSince ?? 0).getTime()).toBeLessThanOrEqual(Date.now() - 6 * 60_000);
  });

  it('rates the unfinished step over the time it has run, not the whole step', async () => {
    // The row is placed in the current 5-minute step, which must still be the last when read.
    await awaitStepRoom(15, 300);
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count) VALUES (date_bin('5 minutes', now(), 'epoch'), 'demo', 'POST /partial', 'new', 600)`,
    );
    await rebuildSeries(db.pool);
    const six = await readOverview(dashboard, overviewQuery.parse({ range: '6h', scope: 'POST /partial' }));
    const last = six.flow.at(-1);
    const elapsed = (new Date(six.now).getTime() - new Date(last?.t ?? 0).getTime()) / 1000;
    expect(last?.seconds).toBeCloseTo(Math.max(1, elapsed), 0);
    expect(last?.seconds).toBeLessThan(300);
    expect(last?.perSecond.new).toBeCloseTo(600 / (last?.seconds ?? 1), 5);
    expect(six.flow.at(-2)?.seconds).toBe(300);
  });

  it('knows the names the URL may carry, and corrects the others', async () => {
    const names = await knownOverviewNames(dashboard, { service: 'demo', scope: 'POST /partial' });
    // POST /partial has no policy, but recorded flow knows it.
    expect(names.scopes).toContainEqual({ service: 'demo', scope: 'POST /partial' });
    expect(correctOverviewSearch({ range: '24h', service: 'demo', scope: 'POST /partial' }, names)).toEqual({ search: { range: '24h', service: 'demo', scope: 'POST /partial', refresh: '30' }, notices: [] });
    const unknown = await knownOverviewNames(dashboard, { service: 'nope', scope: 'POST /nowhere' });
    expect(correctOverviewSearch({ range: '2y', service: 'nope', scope: 'POST /nowhere', refresh: '5' }, unknown)).toEqual({
      search: { range: '1h', service: undefined, scope: undefined, refresh: '30' },
      notices: [
        'There is no time range "2y": showing the last hour.',
        'There is no auto-refresh setting "5": showing every 30 s.',
        'There is no service "nope": showing all services.',
        'There is no scope "POST /nowhere": showing all scopes.',
      ],
    });
  });
});
