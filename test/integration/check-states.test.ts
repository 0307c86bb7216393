// Check states (#31 point 3), over real flow rows read through the dashboard's role as the page
// reads them: a value over its threshold that has not yet lasted the rule's "for" duration is
// pending (Prometheus: Normal, Pending, Firing), never a pass; once it has lasted, firing; under
// it, ok.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { overviewQuery, readOverview } from '../../server/metrics/overview';
import { rebuildSeries } from '../../server/metrics/series';
import { awaitStepRoom } from '../helpers/clock';
import { useTestDatabase } from '../helpers/database';

describe('check states', () => {
  const db = useTestDatabase();
  let dashboard: pg.Pool;
  let minute: Date;
  beforeAll(async () => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 2 });
    // The rows are placed by the current minute and the checks' "held N minutes" counts from it:
    // the file's reads (a few seconds) must end within the minute they were written in.
    await awaitStepRoom(30);
    // Three services, each one scope of 100 claims a minute over the last seven whole minutes:
    // "brief" at 40% conflicts in the last two only, "long" at 40% in all seven, "calm" at 2%.
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', v, 'POST /refunds', o,
              CASE WHEN v = 'calm' THEN (CASE o WHEN 'new' THEN 98 ELSE 2 END)
                   WHEN v = 'long' OR m <= 2 THEN (CASE o WHEN 'new' THEN 60 ELSE 40 END)
                   ELSE (CASE o WHEN 'new' THEN 100 ELSE 0 END) END
       FROM generate_series(1, 7) AS m, (VALUES ('brief'), ('long'), ('calm')) AS s(v), (VALUES ('new'), ('conflict')) AS t(o)`,
    );
    await rebuildSeries(db.pool);
    const { rows } = await db.pool.query<{ minute: Date }>(`SELECT date_trunc('minute', now()) AS minute`);
    minute = rows[0]?.minute ?? new Date();
  });
  afterAll(async () => {
    await dashboard.end();
  });

  const conflictChecks = async (service?: string) =>
    (await readOverview(dashboard, overviewQuery.parse({ range: '1h', ...(service ? { service } : {}) }), undefined, 3_600)).checks.filter((check) => check.name === 'conflict_rate');

  it('over its threshold for less than its window: pending, since the first minute over, N of M minutes, never firing', async () => {
    const [brief, ...others] = await conflictChecks('brief');
    expect(others).toEqual([]);
    expect(brief).toMatchObject({ state: 'pending', firing: false, service: 'brief', scope: 'POST /refunds', forMinutes: 5, heldMinutes: 2, threshold: 'over 10% for 5 min' });
    expect(brief?.since?.getTime()).toBe(minute.getTime() - 2 * 60_000);
  });

  it('over its threshold for its whole window: firing', async () => {
    const [long, ...others] = await conflictChecks('long');
    expect(others).toEqual([]);
    expect(long).toMatchObject({ state: 'firing', firing: true, service: 'long', scope: 'POST /refunds', value: '40%', forMinutes: 5 });
    expect(long?.heldMinutes).toBeGreaterThanOrEqual(5);
  });

  it('under its threshold: ok, with no since', async () => {
    const [calm, ...others] = await conflictChecks('calm');
    expect(others).toEqual([]);
    expect(calm).toMatchObject({ state: 'ok', firing: false, value: '2%', since: null, heldMinutes: null, forMinutes: 5 });
  });

  it('all services: the firing scope and the pending one, each named; every check has a state', async () => {
    const all = await readOverview(dashboard, overviewQuery.parse({ range: '1h' }), undefined, 3_600);
    expect(all.checks.filter((check) => check.name === 'conflict_rate').map((check) => [check.state, check.service])).toEqual([
      ['firing', 'long'],
      ['pending', 'brief'],
    ]);
    for (const check of all.checks) expect(['ok', 'pending', 'firing']).toContain(check.state);
    // The stores rules without a duration are ok or firing, never pending.
    expect(all.checks.find((check) => check.name === 'cleanup_lag')).toMatchObject({ state: 'ok', forMinutes: null });
    // Pending is not an alert: the banners' list (alerts) holds the firing one only.
    expect(all.alerts.map((alert) => [alert.name, alert.service])).toEqual([['conflict_rate', 'long']]);
  });
});
