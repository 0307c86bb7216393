// The overview's events (policy changes, failed sweeps, alerts that started in the window, service
// instances' starts) and its comparison with the same window a day or a week earlier.
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createRetrysafe, PACKAGE_VERSION } from '@retrysafe/store';
import { rebuildSeries } from '../../server/metrics/series';
import { overviewQuery, readOverview } from '../../server/metrics/overview';
import { useTestDatabase } from '../helpers/database';

describe('overview events and comparison', () => {
  const db = useTestDatabase();

  it('lists the policy changes and failed sweeps in the window, and none outside it', async () => {
    await db.pool.query(
      `INSERT INTO endpoint_policies (service, endpoint, scope_mode, retry_window_seconds, retention_seconds, lease_ms, lock_timeout_ms, max_response_bytes, live_key_quota, updated_by)
       SELECT s, e, 'endpoint', 86400, 93600, 30000, 5000, 4096, 100000, 'test' FROM (VALUES ('demo', 'POST /in'), ('orders', 'POST /other'), ('demo', 'POST /out')) AS t(s, e);
       INSERT INTO endpoint_policy_history (service, endpoint, version, changed_at, changed_by, reason, previous, current) VALUES
         ('demo', 'POST /in', 2, now() - interval '20 minutes', 'a@example.com', 'longer window', '{}', '{}'),
         ('orders', 'POST /other', 1, now() - interval '25 minutes', 'a@example.com', 'created', NULL, '{}'),
         ('demo', 'POST /out', 3, now() - interval '3 hours', 'a@example.com', 'older', '{}', '{}');
       INSERT INTO sweep_runs (trigger, status, started_at, finished_at, error) VALUES
         ('schedule', 'failed', now() - interval '3 hours', now() - interval '3 hours', 'old'),
         ('schedule', 'completed', now() - interval '15 minutes', now() - interval '15 minutes', NULL),
         ('schedule', 'failed', now() - interval '10 minutes', now() - interval '10 minutes', 'boom');`,
    );
    const overview = await readOverview(db.pool, overviewQuery.parse({ range: '1h' }));
    // No sweep finished for 10 min: the stalled-sweeper alert fires, and its start is in the window.
    expect(overview.events.filter((event) => event.kind === 'alert').map((event) => event.text)).toEqual([expect.stringMatching(/^Alert started: No sweep has finished/)]);
    expect(overview.events.filter((event) => event.kind !== 'alert').map(({ kind, text, service, scope }) => ({ kind, text: text.replace(/\d+/, 'N'), service, scope }))).toEqual([
      { kind: 'sweep_failed', text: 'Sweep run N failed', service: undefined, scope: undefined },
      { kind: 'policy', text: 'Policy changed: POST /in (demo), version N', service: 'demo', scope: 'POST /in' },
      { kind: 'policy', text: 'Policy created: POST /other (orders), version N', service: 'orders', scope: 'POST /other' },
    ]);
    for (const event of overview.events) expect(Date.parse(event.at)).toBeGreaterThanOrEqual(Date.parse(overview.from));
    // One service: its policy changes and the store's sweeps.
    const orders = await readOverview(db.pool, overviewQuery.parse({ range: '1h', service: 'orders' }));
    expect(orders.events.filter((event) => event.kind !== 'alert').map((event) => event.kind)).toEqual(['sweep_failed', 'policy']);
    // The older ones are in a window that holds them, and the newer ones are not.
    const { rows } = await db.pool.query<{ at: Date }>(`SELECT now() - interval '3 hours' AS at`);
    const at = rows[0]?.at ?? new Date();
    const earlier = await readOverview(
      db.pool,
      overviewQuery.parse({ from: new Date(at.getTime() - 30 * 60_000).toISOString(), to: new Date(at.getTime() + 30 * 60_000).toISOString() }),
    );
    // (Both at the same moment: in either order.)
    expect(earlier.events.filter((event) => event.kind !== 'alert').map(({ kind, scope }) => ({ kind, scope })).sort((a, b) => a.kind.localeCompare(b.kind))).toEqual([
      { kind: 'policy', scope: 'POST /out' },
      { kind: 'sweep_failed', scope: undefined },
    ]);
  });

  it("marks an adopting service's instance start with its package version, read by the dashboard's role", async () => {
    // A service on @retrysafe/store starts: createRetrysafe records it (no server code involved).
    const orders = await createRetrysafe({ connectionString: db.url, service: 'orders', fingerprintSecret: randomBytes(32), responseKeys: `k1:${randomBytes(32).toString('base64')}`, quota: false });
    await orders.stop();
    await db.pool.query(
      `INSERT INTO retrysafe.service_starts (started_at, service, instance, package_version) VALUES
         (now() - interval '5 minutes', 'shipping', 'host-b:7', '0.0.9'),
         (now() - interval '3 hours', 'orders', 'host-a:1', '0.0.8')`,
    );
    const { rows } = await db.pool.query<{ started_at: Date }>("SELECT started_at FROM retrysafe.service_starts WHERE service = 'orders' AND package_version = $1", [PACKAGE_VERSION]);
    const started = rows[0]?.started_at;
    expect(started).toBeInstanceOf(Date);
    const dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 2 });
    try {
      const starts = async (service?: string) =>
        (await readOverview(dashboard, overviewQuery.parse({ range: '1h', ...(service ? { service } : {}) }))).events.filter((event) => event.kind === 'instance_start');
      const mine = { at: started?.toISOString(), kind: 'instance_start', text: `Instance of orders started (${hostname()}:${process.pid}), @retrysafe/store ${PACKAGE_VERSION}`, service: 'orders' };
      // Newest first; of every service, or of the one chosen; the one 3 hours ago is outside the hour.
      expect(await starts()).toEqual([mine, { at: expect.any(String) as string, kind: 'instance_start', text: 'Instance of shipping started (host-b:7), @retrysafe/store 0.0.9', service: 'shipping' }]);
      expect(await starts('orders')).toEqual([mine]);
    } finally {
      await dashboard.end();
    }
  });

  it('compares with the same window a day earlier: the flow that window reads, point for point', async () => {
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count) VALUES
         (date_trunc('minute', now()) - interval '1 day 10 minutes', 'demo', 'POST /a', 'new', 7),
         (date_trunc('minute', now()) - interval '1 day 20 minutes', 'demo', 'POST /a', 'conflict', 3),
         (date_trunc('minute', now()) - interval '10 minutes', 'demo', 'POST /a', 'new', 11)`,
    );
    await rebuildSeries(db.pool);
    const now = await readOverview(db.pool, overviewQuery.parse({ range: '1h', compare: '1d' }));
    expect(now.compare?.offsetSeconds).toBe(86_400);
    expect(now.compare?.flow).toHaveLength(now.flow.length);
    const day = 86_400_000;
    const then = await readOverview(db.pool, overviewQuery.parse({ from: new Date(Date.parse(now.from) - day).toISOString(), to: new Date(Date.parse(now.to) - day).toISOString() }));
    expect(then.from).toBe(new Date(Date.parse(now.from) - day).toISOString());
    expect(now.compare?.flow).toEqual(then.flow);
    expect(now.compare?.flow.reduce((sum, point) => sum + point.claims, 0)).toBe(10);
    expect(now.flow.reduce((sum, point) => sum + point.claims, 0)).toBe(11);
    // An absolute window too; a week earlier holds nothing here.
    const week = await readOverview(db.pool, overviewQuery.parse({ from: now.from, to: now.to, compare: '7d' }));
    expect(week.compare).toMatchObject({ offsetSeconds: 604_800 });
    expect(week.compare?.flow).toHaveLength(week.flow.length);
    expect(week.compare?.flow.every((point) => point.claims === 0)).toBe(true);
    // Without compare, none.
    expect(await readOverview(db.pool, overviewQuery.parse({ range: '1h' }))).not.toHaveProperty('compare');
  });

  it('refuses a compare other than 1d or 7d, naming the parameter, with a range or a window', () => {
    const issue = (query: Record<string, string>) => {
      const parsed = overviewQuery.safeParse(query);
      return parsed.success ? null : parsed.error.issues.map((one) => [one.path.join('.'), one.message]);
    };
    expect(issue({ range: '6h', compare: '1d' })).toBeNull();
    expect(issue({ from: '2026-12-01T00:00:00Z', to: '2026-12-01T06:00:00Z', compare: '7d' })).toBeNull();
    expect(issue({ range: '6h', compare: '2d' })).toEqual([['compare', "must be '1d' or '7d'"]]);
    expect(issue({ from: '2026-12-01T00:00:00Z', to: '2026-12-01T06:00:00Z', compare: 'week' })).toEqual([['compare', "must be '1d' or '7d'"]]);
  });
});
