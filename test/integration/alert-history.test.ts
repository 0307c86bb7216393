// The alert history (#31 point 5): an alert that fired and stopped within the overview's window
// is marked at its start and its end, each written once however many evaluators run at once;
// the dashboard role reads them; ended firings and old service starts (the store's
// service_starts: overview-events.test.ts marks them) are deleted after SERVER_EVENTS_RETENTION_DAYS.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inTransaction } from '../../db/transaction';
import { alertThresholds, evaluateAlertStates, readAlertInputs } from '../../server/metrics/alerts';
import { recordAlertHistory, recordAlertTransitions, SERVER_EVENTS_RETENTION_DAYS } from '../../server/metrics/alert-history';
import { overviewQuery, readOverview } from '../../server/metrics/overview';
import { useTestDatabase } from '../helpers/database';

const EVALUATORS = 8;

describe('alert history', () => {
  const db = useTestDatabase();
  let dashboard: pg.Pool;
  beforeAll(() => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 8 });
  });
  afterAll(() => dashboard.end());

  const history = async () =>
    (await db.pool.query<{ check: string; started_at: Date; ended_at: Date | null }>('SELECT "check", started_at, ended_at FROM retrysafe_server.alert_history ORDER BY id')).rows;

  it('records a firing that started and ended once with evaluators at once, and the overview marks its start and end', async () => {
    // The last sweep finished 15 minutes ago: with a sweep a minute, the stalled-sweeper alert fires.
    await db.pool.query(`INSERT INTO sweep_runs (trigger, status, started_at, finished_at) VALUES ('schedule', 'completed', now() - interval '15 minutes', now() - interval '15 minutes')`);
    // Evaluators without the duty's lock, each in its own transaction on its own connection, at once.
    const inputs = await readAlertInputs(db.pool, { sweepIntervalSeconds: 60 });
    const firing = evaluateAlertStates(inputs, alertThresholds).firing;
    expect(firing.map((alert) => alert.name)).toEqual(['sweeper_stalled']);
    const racing = await Promise.all(Array.from({ length: EVALUATORS }, () => inTransaction(db.pool, (client) => recordAlertTransitions(client, firing, inputs.now))));
    expect(racing.reduce((sum, result) => sum + result.started, 0)).toBe(1);
    // The duty itself, on several instances at once: still one firing, no second start.
    const duties = await Promise.all(Array.from({ length: EVALUATORS }, () => recordAlertHistory(db.pool, { sweepIntervalSeconds: 60 })));
    expect(duties.reduce((sum, result) => sum + (result?.started ?? 0) + (result?.ended ?? 0), 0)).toBe(0);
    const started = await history();
    expect(started).toEqual([{ check: 'sweeper_stalled', started_at: firing[0]?.since, ended_at: null }]);

    // While it fires: one start mark (the recorded one, not the live alert's again).
    const during = await readOverview(dashboard, overviewQuery.parse({ range: '1h' }));
    expect(during.alerts.map((alert) => alert.name)).toEqual(['sweeper_stalled']);
    expect(during.events.filter((event) => event.kind === 'alert' || event.kind === 'alert_end').map(({ kind, at }) => ({ kind, at }))).toEqual([
      { kind: 'alert', at: firing[0]?.since?.toISOString() },
    ]);

    // A sweep finishes: the alert stops, and its end is recorded once, by evaluators at once.
    await db.pool.query(`INSERT INTO sweep_runs (trigger, status, started_at, finished_at) VALUES ('schedule', 'completed', now(), now())`);
    const ends = await Promise.all(Array.from({ length: EVALUATORS }, () => recordAlertHistory(db.pool, { sweepIntervalSeconds: 60 })));
    expect(ends.reduce((sum, result) => sum + (result?.ended ?? 0), 0)).toBe(1);
    const afterwards = await Promise.all(Array.from({ length: EVALUATORS }, () => inTransaction(db.pool, (client) => recordAlertTransitions(client, [], new Date()))));
    expect(afterwards.reduce((sum, result) => sum + result.ended, 0)).toBe(0);
    const ended = await history();
    expect(ended).toHaveLength(1);
    expect(ended[0]?.ended_at).toBeInstanceOf(Date);

    // Resolved within the range: its start and its end, read by the dashboard's role.
    const overview = await readOverview(dashboard, overviewQuery.parse({ range: '1h' }));
    expect(overview.alerts).toEqual([]);
    const marks = overview.events.filter((event) => event.kind === 'alert' || event.kind === 'alert_end');
    expect(marks.map(({ kind, at, text }) => ({ kind, at, text }))).toEqual([
      { kind: 'alert_end', at: ended[0]?.ended_at?.toISOString(), text: expect.stringMatching(/^Alert ended after 1[12] min: No sweep has finished/) as string },
      { kind: 'alert', at: firing[0]?.since?.toISOString(), text: expect.stringMatching(/^Alert started: No sweep has finished/) as string },
    ]);
    // A window before it holds neither.
    const before = new Date(Date.parse(overview.from) - 3_600_000);
    const earlier = await readOverview(dashboard, overviewQuery.parse({ from: before.toISOString(), to: overview.from }));
    expect(earlier.events.filter((event) => event.kind === 'alert' || event.kind === 'alert_end')).toEqual([]);
  });

  it('deletes ended firings and service starts past the retention, never an open firing', async () => {
    await db.pool.query(
      `INSERT INTO retrysafe_server.alert_history ("check", service, scope, store_wide, severity, summary, started_at, ended_at) VALUES
         ('claim_p99', 'demo', 'POST /old', false, 'warning', 'old', now() - $1::int * interval '1 day' - interval '2 hours', now() - $1::int * interval '1 day' - interval '1 hour'),
         ('claim_p99', 'demo', 'POST /kept', false, 'warning', 'kept', now() - $1::int * interval '1 day' + interval '1 hour', now() - $1::int * interval '1 day' + interval '2 hours');
       INSERT INTO retrysafe.service_starts (started_at, service, instance, package_version) VALUES
         (now() - $1::int * interval '1 day' - interval '1 hour', 'orders', 'old:1', '0.0.1'),
         (now() - $1::int * interval '1 day' + interval '1 hour', 'orders', 'kept:1', '0.0.1')`.replaceAll('$1', String(SERVER_EVENTS_RETENTION_DAYS)),
    );
    await recordAlertHistory(db.pool, { sweepIntervalSeconds: 60 });
    const { rows } = await db.pool.query<{ summary: string }>("SELECT summary FROM retrysafe_server.alert_history WHERE summary IN ('old', 'kept')");
    expect(rows.map((row) => row.summary)).toEqual(['kept']);
    const { rows: starts } = await db.pool.query<{ instance: string }>("SELECT instance FROM retrysafe.service_starts WHERE instance IN ('old:1', 'kept:1')");
    expect(starts.map((row) => row.instance)).toEqual(['kept:1']);
  });

  it('gives the dashboard role no write on the alert history or the service starts', async () => {
    await expect(dashboard.query(`DELETE FROM retrysafe_server.alert_history`)).rejects.toMatchObject({ code: '42501' });
    await expect(dashboard.query(`INSERT INTO retrysafe.service_starts (service, instance, package_version) VALUES ('x', 'y', 'z')`)).rejects.toMatchObject({ code: '42501' });
    await expect(dashboard.query(`DELETE FROM retrysafe.service_starts`)).rejects.toMatchObject({ code: '42501' });
  });
});
