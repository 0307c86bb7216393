// The overview read model: rates, shares and percentiles per step from the stored buckets,
// the store series, and nothing of any stored response.
import { describe, expect, it } from 'vitest';
import { bucketOf, FlowRecorder } from '@retrysafe/store';
import { rollUpFlowMetrics } from '../../server/metrics/rollup';
import { rebuildSeries } from '../../server/metrics/series';
import { overviewQuery, readOverview } from '../../server/metrics/overview';
import { sampleStoreStats } from '../../server/metrics/sampler';
import { useTestDatabase } from '../helpers/database';
import { createTestStore, jsonResult, principal, testPolicy } from '../../packages/store/test/helpers/store';

describe('overview', () => {
  const db = useTestDatabase();

  it('aggregates a range into steps with rates, shares and latency percentiles, per service', async () => {
    // Two services; the orders service has a scope of the same name as one of the demo's.
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
       SELECT date_trunc('minute', now()) - interval '5 minutes', v, s, o, c FROM (VALUES
         ('demo', 'POST /a', 'new', 60), ('demo', 'POST /a', 'replay', 30), ('demo', 'POST /a', 'mismatch', 10), ('orders', 'POST /b', 'new', 120),
         ('orders', 'POST /a', 'new', 5)) AS t(v, s, o, c);
       INSERT INTO claim_latency_minute (minute, service, scope, bucket, count) VALUES
         (date_trunc('minute', now()) - interval '5 minutes', 'demo', 'POST /a', $1, 95),
         (date_trunc('minute', now()) - interval '5 minutes', 'demo', 'POST /a', $2, 5),
         (date_trunc('minute', now()) - interval '5 minutes', 'orders', 'POST /a', $2, 5);
       INSERT INTO store_stats (sampled_at, estimated_rows, baseline_rows, table_bytes, index_bytes, toast_bytes, cleanup_lag_seconds, stale_claims)
       VALUES (date_trunc('minute', now()) - interval '2 minutes', 1500, 1000, 8192, 16384, 0, 12, 0),
              (date_trunc('minute', now()) - interval '3 minutes', 1400, 1000, 8192, 16384, 0, 12, 0);
       INSERT INTO store_stats_scopes (sampled_at, service, scope, estimated_rows, response_bytes, sampled_fraction) VALUES
         (date_trunc('minute', now()) - interval '3 minutes', 'demo', 'POST /a', 100, 1, 1),
         (date_trunc('minute', now()) - interval '2 minutes', 'demo', 'POST /a', 900, 90000, 1),
         (date_trunc('minute', now()) - interval '2 minutes', 'orders', 'POST /b', 600, 6000, 1);`.replace('$1', String(bucketOf(1))).replaceAll('$2', String(bucketOf(40))),
    );
    // The series as the flush writes them beside those buckets.
    await rebuildSeries(db.pool);
    const all = await readOverview(db.pool, overviewQuery.parse({ range: '1h' }));
    expect(all.stepSeconds).toBe(60);
    expect(all.flow).toHaveLength(60);
    expect(all.service).toBeNull();
    expect(all.services).toEqual(['demo', 'orders']);
    expect(all.scopes).toEqual(['POST /a', 'POST /b']);
    const busy = all.flow.filter((point) => point.claims > 0);
    expect(busy).toHaveLength(1);
    expect(busy[0]).toMatchObject({ claims: 225, counts: { new: 185, replay: 30, mismatch: 10 } });
    expect(busy[0]?.perSecond.new).toBeCloseTo(185 / 60, 5);
    // One service: only its claims and scopes; the services list still names every service.
    const demo = await readOverview(db.pool, overviewQuery.parse({ range: '1h', service: 'demo' }));
    expect(demo).toMatchObject({ service: 'demo', services: ['demo', 'orders'], scopes: ['POST /a'] });
    expect(demo.flow.find((candidate) => candidate.claims > 0)).toMatchObject({ claims: 100, counts: { new: 60, replay: 30, mismatch: 10 } });
    // One scope name: every service's claims under it, unless a service is chosen too.
    const anyA = await readOverview(db.pool, overviewQuery.parse({ range: '1h', scope: 'POST /a' }));
    expect(anyA.flow.find((candidate) => candidate.claims > 0)).toMatchObject({ claims: 105, counts: { new: 65 } });
    const a = await readOverview(db.pool, overviewQuery.parse({ range: '1h', service: 'demo', scope: 'POST /a' }));
    const point = a.flow.find((candidate) => candidate.claims > 0);
    expect(point?.claims).toBe(100);
    expect(point?.share.mismatch).toBeCloseTo(0.1, 5);
    expect(point?.p50Ms).toBeLessThan(2);
    expect(point?.p99Ms).toBeGreaterThan(30);
    expect(a.store).toEqual([
      expect.objectContaining({ rows: 1400, baseline: 1000 }),
      expect.objectContaining({ rows: 1500, baseline: 1000, ratio: 1.5, indexBytes: 16384 }),
    ]);
    expect(all.storeByScope?.scopes).toEqual([
      { service: 'demo', scope: 'POST /a', estimatedRows: 900, responseBytes: 90000 },
      { service: 'orders', scope: 'POST /b', estimatedRows: 600, responseBytes: 6000 },
    ]);
    expect(a.storeByScope?.scopes).toEqual([{ service: 'demo', scope: 'POST /a', estimatedRows: 900, responseBytes: 90000 }]);
    const orders = await readOverview(db.pool, overviewQuery.parse({ range: '1h', service: 'orders' }));
    expect(orders.scopes).toEqual(['POST /a', 'POST /b']);
    expect(orders.storeByScope?.scopes).toEqual([{ service: 'orders', scope: 'POST /b', estimatedRows: 600, responseBytes: 6000 }]);
    expect(orders.flow.find((candidate) => candidate.claims > 0)).toMatchObject({ claims: 125 });
  });

  it('reads hour buckets for week and month ranges', async () => {
    await db.pool.query(
      `INSERT INTO flow_counts_hour (hour, service, scope, outcome, count) VALUES (date_trunc('hour', now()) - interval '3 days', 'demo', 'POST /hourly', 'new', 7200)`,
    );
    await rebuildSeries(db.pool);
    const week = await readOverview(db.pool, overviewQuery.parse({ range: '7d', scope: 'POST /hourly' }));
    expect(week.stepSeconds).toBe(3_600);
    expect(week.flow.reduce((sum, point) => sum + point.counts.new, 0)).toBe(7200);
    // One sample per step: the last one of each hour.
    await db.pool.query(
      `INSERT INTO store_stats (sampled_at, estimated_rows, baseline_rows, table_bytes, index_bytes, toast_bytes, cleanup_lag_seconds, stale_claims)
       SELECT date_trunc('hour', now()) - interval '2 days' + m * interval '1 minute', m, 1, 0, 0, 0, 0, 0 FROM generate_series(0, 119) AS m`,
    );
    const month = await readOverview(db.pool, overviewQuery.parse({ range: '7d' }));
    expect(month.store.filter((point) => point.baseline === 1).map((point) => point.rows)).toEqual([59, 119]);
  });

  it('includes everything recorded up to now in every range, before and after the roll-up', async () => {
    const scope = 'POST /recent';
    const recorder = new FlowRecorder(db.pool, { flushIntervalMs: 3_600_000 });
    for (let i = 0; i < 30; i += 1) recorder.record({ service: 'demo', scope, outcome: 'new', claimLatencyMs: 2 });
    for (let i = 0; i < 7; i += 1) recorder.record({ service: 'demo', scope, outcome: 'conflict', claimLatencyMs: 1 });
    await recorder.flush();
    const totals = async (range: '1h' | '24h' | '7d' | '30d') => {
      const overview = await readOverview(db.pool, overviewQuery.parse({ range, scope }));
      return {
        new: overview.flow.reduce((sum, point) => sum + point.counts.new, 0),
        conflict: overview.flow.reduce((sum, point) => sum + point.counts.conflict, 0),
        hasLatency: overview.flow.some((point) => point.p99Ms !== null),
        listed: overview.scopes.includes(scope),
      };
    };
    const expected = { new: 30, conflict: 7, hasLatency: true, listed: true };
    for (const range of ['1h', '24h', '7d', '30d'] as const) expect({ range, ...(await totals(range)) }).toEqual({ range, ...expected });
    // Rolled up into hour buckets (a minute retention of zero moves them all): the long ranges still count each claim once.
    await rollUpFlowMetrics(db.pool, { minuteRetentionMs: 0, hourRetentionMs: 40 * 86_400_000 });
    for (const range of ['7d', '30d'] as const) expect({ range, ...(await totals(range)) }).toEqual({ range, ...expected });
  });

  it('refuses unknown parameters and ranges', () => {
    expect(overviewQuery.safeParse({ range: '2h' }).success).toBe(false);
    expect(overviewQuery.safeParse({ range: '1h', body: 'x' }).success).toBe(false);
    expect(overviewQuery.safeParse({ range: '1h', service: 'Not A Service' }).success).toBe(false);
  });

  it('checks from/to: ISO 8601 with a zone, both or neither, from before to, at most 30 days, each error naming its parameter', () => {
    const issue = (query: Record<string, string>) => {
      const parsed = overviewQuery.safeParse(query);
      return parsed.success ? null : parsed.error.issues.map((one) => one.path.join('.'));
    };
    expect(issue({ from: '2026-12-01T00:00:00Z', to: '2026-12-01T06:00:00Z' })).toBeNull();
    expect(issue({ from: '2026-12-01T00:00:00+01:00', to: '2026-12-01T00:30:00.5Z' })).toBeNull();
    expect(issue({ from: 'yesterday', to: '2026-12-01T06:00:00Z' })).toEqual(['from']);
    expect(issue({ from: '2026-12-01', to: '2026-12-01T06:00:00Z' })).toEqual(['from']);
    expect(issue({ from: '2026-12-01T00:00:00Z', to: '2026-13-01T06:00:00Z' })).toEqual(['to']);
    expect(issue({ from: '2026-12-01T00:00:00Z' })).toEqual(['to']);
    expect(issue({ to: '2026-12-01T00:00:00Z' })).toEqual(['from']);
    expect(issue({ from: '2026-12-01T06:00:00Z', to: '2026-12-01T06:00:00Z' })).toEqual(['to']);
    expect(issue({ from: '2026-12-01T06:00:00Z', to: '2026-12-01T05:00:00Z' })).toEqual(['to']);
    expect(issue({ from: '2026-11-01T00:00:00Z', to: '2026-12-01T00:00:01Z' })).toEqual(['to']);
    expect(issue({ from: '2026-11-01T00:00:00Z', to: '2026-12-01T00:00:00Z' })).toBeNull();
  });

  it('reads an absolute window at the step of the shortest range as long, widened to whole steps', async () => {
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count) VALUES
         (date_trunc('minute', now()) - interval '3 hours', 'demo', 'POST /a', 'new', 7),
         (date_trunc('minute', now()) - interval '30 minutes', 'demo', 'POST /a', 'new', 11)`,
    );
    await rebuildSeries(db.pool);
    const { rows } = await db.pool.query<{ at: Date }>(`SELECT date_trunc('minute', now()) - interval '3 hours' AS at`);
    const at = rows[0]?.at ?? new Date();
    // Twenty minutes around the older claims, cut mid-minute: a 1 h step (60 s), whole minutes.
    const from = new Date(at.getTime() - 10 * 60_000 + 15_000);
    const to = new Date(at.getTime() + 10 * 60_000 + 15_000);
    const window = await readOverview(db.pool, overviewQuery.parse({ from: from.toISOString(), to: to.toISOString() }));
    expect(window).toMatchObject({ absolute: true, range: '1h', stepSeconds: 60, from: new Date(at.getTime() - 10 * 60_000).toISOString(), to: new Date(at.getTime() + 11 * 60_000).toISOString() });
    expect(window.flow).toHaveLength(21);
    expect(window.flow.reduce((sum, point) => sum + point.claims, 0)).toBe(7);
    // Seven hours: the 24 h range's 15-minute step.
    const longer = await readOverview(db.pool, overviewQuery.parse({ range: '1h', from: new Date(at.getTime() - 3_600_000).toISOString(), to: new Date(at.getTime() + 6 * 3_600_000).toISOString() }));
    expect(longer).toMatchObject({ absolute: true, range: '24h', stepSeconds: 900 });
    expect(longer.flow.reduce((sum, point) => sum + point.claims, 0)).toBe(18);
    // A range still ends now.
    expect(await readOverview(db.pool, overviewQuery.parse({ range: '1h' }))).toMatchObject({ absolute: false, range: '1h' });
  });

  it('never carries a stored response or a fingerprint', async () => {
    const sentinel = 'SENTINEL-overview-7f3a';
    const { store } = createTestStore(db.pool);
    await store.execute({
      principalId: principal(),
      key: sentinel,
      endpoint: 'POST /a',
      method: 'POST',
      body: { sentinel },
      policy: testPolicy,
      mode: 'claim-first',
      work: () => Promise.resolve(jsonResult(201, { sentinel })),
    });
    await sampleStoreStats(db.pool);
    const overview = await readOverview(db.pool, overviewQuery.parse({ range: '24h' }));
    expect(overview.storeByScope?.scopes.map((figure) => figure.scope)).toContain('POST /a');
    const json = JSON.stringify(overview);
    expect(json).not.toContain(sentinel);
    expect(json).not.toMatch(/fingerprint|response_body|responseBody/);
  });
});
