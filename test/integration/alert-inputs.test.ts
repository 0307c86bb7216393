// The two alerts added with the Prometheus rules, from the real tables: quota rejections in
// the flow minute buckets and the last finished sweep reach evaluateAlerts through
// readAlertInputs, the overview shows them, and /api/metrics exports them as firing.
import { describe, expect, it } from 'vitest';
import { evaluateAlerts, readAlertInputs } from '../../server/metrics/alerts';
import { overviewQuery, readOverview } from '../../server/metrics/overview';
import { createPrometheusMetrics } from '../../server/metrics/prometheus';
import { useTestDatabase } from '../helpers/database';

describe('alert inputs', () => {
  const db = useTestDatabase();

  it('fire rejection_rate from stored rejections and sweeper_stalled from the last finished sweep', async () => {
    // Six busy minutes in which 2 of 102 claims were refused at the quota (1.96%), and a sweep
    // that finished 4 minutes ago, with a run started since that has not finished.
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', 'demo', 'POST /a', o, c
       FROM generate_series(0, 6) AS m, (VALUES ('new', 100), ('rejected', 2)) AS v(o, c)`,
    );
    await db.pool.query(
      `INSERT INTO sweep_runs (trigger, status, started_at, finished_at, rows_deleted) VALUES ('interval', 'completed', now() - interval '5 minutes', now() - interval '4 minutes', 0);
       INSERT INTO sweep_runs (trigger, status) VALUES ('interval', 'running')`,
    );
    const inputs = await readAlertInputs(db.pool, { sweepIntervalSeconds: 60 });
    expect(inputs.flow.at(-1)).toMatchObject({ claims: 102, rejections: 2 });
    expect(evaluateAlerts(inputs).map((alert) => alert.name)).toEqual(['rejection_rate', 'sweeper_stalled']);
    // Sweeping every 2 minutes, 4 minutes without a finished run is not yet 3 intervals.
    expect(evaluateAlerts(await readAlertInputs(db.pool, { sweepIntervalSeconds: 120 })).map((alert) => alert.name)).toEqual(['rejection_rate']);

    const overview = await readOverview(db.pool, overviewQuery.parse({ range: '1h' }), undefined, 60);
    expect(overview.alerts.map((alert) => [alert.name, alert.severity])).toEqual([
      ['rejection_rate', 'warning'],
      ['sweeper_stalled', 'warning'],
    ]);
    const text = await createPrometheusMetrics(db.pool, undefined, { sweepIntervalSeconds: 60 }).registry.metrics();
    expect(text).toMatch(/^retrysafe_alert_firing\{name="rejection_rate",severity="warning",service="demo",scope="POST \/a"\} 1$/m);
    expect(text).toMatch(/^retrysafe_alert_firing\{name="sweeper_stalled",severity="warning"\} 1$/m);
  });

  it('judge each service’s scope on its own: a scope in trouble fires, named, however busy and healthy the others are', async () => {
    // Ten minutes: the orders service's POST /refunds at 36% conflicts of 25 claims a minute; the
    // demo's POST /refunds (the same scope name) and POST /payments clean (1.6% overall).
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', v, s, o, c
       FROM generate_series(0, 9) AS m,
            (VALUES ('orders', 'POST /refunds', 'new', 16), ('orders', 'POST /refunds', 'conflict', 9), ('demo', 'POST /refunds', 'new', 50),
                    ('demo', 'POST /payments', 'new', 500)) AS t(v, s, o, c)`,
    );
    const alerts = evaluateAlerts(await readAlertInputs(db.pool, { sweepIntervalSeconds: 3_600 }));
    const conflicts = alerts.filter((alert) => alert.name === 'conflict_rate');
    expect(conflicts.map((alert) => [alert.service, alert.scope, alert.storeWide])).toEqual([['orders', 'POST /refunds', false]]);
    expect(conflicts[0]?.summary).toMatch(/^POST \/refunds \(orders\): Over 10% of claims for 5 min/);
    const forScope = async (query: { service?: string; scope?: string }) =>
      (await readOverview(db.pool, overviewQuery.parse({ range: '1h', ...query }), undefined, 3_600)).alerts.map(
        (alert) => `${alert.name}@${alert.scope === null ? (alert.storeWide ? 'store' : 'all') : `${alert.service}:${alert.scope}`}`,
      );
    expect(await forScope({ scope: 'POST /refunds' })).toContain('conflict_rate@orders:POST /refunds');
    expect(await forScope({ service: 'orders' })).toContain('conflict_rate@orders:POST /refunds');
    expect(await forScope({ service: 'orders', scope: 'POST /refunds' })).toContain('conflict_rate@orders:POST /refunds');
    // The demo's scope of the same name, and the demo service, are not in trouble.
    expect(await forScope({ service: 'demo', scope: 'POST /refunds' })).not.toContain('conflict_rate@orders:POST /refunds');
    expect(await forScope({ service: 'demo' })).not.toContain('conflict_rate@orders:POST /refunds');
    expect(await forScope({ scope: 'POST /payments' })).not.toContain('conflict_rate@orders:POST /refunds');
    expect(await forScope({})).toContain('conflict_rate@orders:POST /refunds');
    const text = await createPrometheusMetrics(db.pool, undefined, { sweepIntervalSeconds: 3_600 }).registry.metrics();
    expect(text).toMatch(/^retrysafe_alert_firing\{name="conflict_rate",severity="warning",service="orders",scope="POST \/refunds"\} 1$/m);
  });
});
