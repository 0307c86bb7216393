// The two alerts added with the Prometheus rules, from the real tables: quota rejections in
// the flow minute buckets and the last finished sweep reach evaluateAlerts through
// readAlertInputs, the overview shows them, and /api/metrics exports them as firing.
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { explainPrepared, recordingQueryable, type PlanCacheMode } from '../../packages/store/test/helpers/plan';
import { alertChoiceFlowText, alertCountsText, alertIdleLatencyText, alertLatencyText, alertThresholds, evaluateAlerts, readAlertInputs } from '../../server/metrics/alerts';
import { overviewQuery, readOverview } from '../../server/metrics/overview';
import { rebuildSeries } from '../../server/metrics/series';
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

/** EXPLAIN ANALYZE of `text` prepared with `values` under a plan cache mode: every node. */
const analyze = (client: Pick<pg.ClientBase, 'query' | 'escapeLiteral'>, text: string, values: readonly unknown[], mode: PlanCacheMode) =>
  explainPrepared(client, text, values, mode, { analyze: true });

describe('alert inputs: the latency histograms read', () => {
  const db = useTestDatabase();
  const scopes = 50;
  const buckets = 21;

  it("reads the p99 window's minutes of every scope through the primary key, not the whole 30 minutes, on a young table and an analyzed one", async () => {
    // 30 minutes of 50 busy scopes, 21 latency buckets each: the bench's shape.
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', 'demo', 'POST /s-' || s, 'new', 100
       FROM generate_series(0, 29) AS m, generate_series(1, ${scopes}) AS s;
       INSERT INTO claim_latency_minute (minute, service, scope, bucket, count)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', 'demo', 'POST /s-' || s, b, 5
       FROM generate_series(0, 29) AS m, generate_series(1, ${scopes}) AS s, generate_series(5, ${4 + buckets}) AS b`,
    );
    // The p99 window (5 min) and the minute before it that the rule accepts as its start, plus
    // the minute now is in: at most 7 minutes of each scope's buckets (the old read took 30).
    const bound = (alertThresholds.claimP99Minutes + 2) * scopes * buckets;
    for (const analyzed of [false, true]) {
      if (analyzed) await db.pool.query('ANALYZE flow_counts_minute, claim_latency_minute');
      const recorded = recordingQueryable(db.pool);
      const inputs = await readAlertInputs(recorded.db);
      expect(inputs.flowByScope).toHaveLength(scopes);
      const statement = recorded.statements.find((recordedStatement) => recordedStatement.text === alertLatencyText);
      expect(statement).toBeDefined();
      await expectKeyRangeRead(db.url, alertLatencyText, statement?.values ?? [], 'claim_latency_minute', bound, analyzed);
      // Every scope's p99 window still has its histograms.
      const latest = inputs.flowByScope?.[0]?.points.at(-1);
      expect(latest?.latency.reduce((sum, count) => sum + count, 0)).toBe(5 * buckets);
    }
  });

  it("keeps an idle scope's last busy minutes for its p99 check, and judges the busy ones on their window alone", async () => {
    // POST /idle: busy 12 to 20 minutes ago at 102 ms, nothing since (no minute to judge, so its
    // check passes, showing those minutes). POST /busy: busy all
    // along, at 3.2 ms in the last 5 minutes and 102 ms before (outside its p99 window).
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', 'orders', s, 'new', 50
       FROM (SELECT 'POST /idle' AS s, m FROM generate_series(12, 20) AS m UNION ALL SELECT 'POST /busy', m FROM generate_series(0, 25) AS m) AS t;
       INSERT INTO claim_latency_minute (minute, service, scope, bucket, count)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', 'orders', s, CASE WHEN s = 'POST /busy' AND m < 5 THEN 10 ELSE 20 END, 50
       FROM (SELECT 'POST /idle' AS s, m FROM generate_series(12, 20) AS m UNION ALL SELECT 'POST /busy', m FROM generate_series(0, 25) AS m) AS t`,
    );
    await rebuildSeries(db.pool); // as the flush writes them beside the buckets
    const p99Check = async (scope: string) =>
      (await readOverview(db.pool, overviewQuery.parse({ range: '1h', service: 'orders', scope }))).checks.find((check) => check.name === 'claim_p99');
    expect(await p99Check('POST /idle')).toMatchObject({ firing: false, value: '102 ms (last busy minutes)' });
    expect(await p99Check('POST /busy')).toMatchObject({ firing: false, value: '3.2 ms' });
    const orders = (await readOverview(db.pool, overviewQuery.parse({ range: '1h', service: 'orders' }))).checks.find((check) => check.name === 'claim_p99');
    expect(orders).toMatchObject({ value: '3.2 ms' });
    // The idle scope's older minutes: only the histograms its check shows (its last five busy
    // minutes, 12 to 16 minutes ago), from the one-minute series at its level; no other's read,
    // and nothing when no choice is checked (the Prometheus gauges).
    const recorded = recordingQueryable(db.pool);
    await readAlertInputs(recorded.db);
    expect(recorded.statements.some((statement) => statement.text === alertIdleLatencyText)).toBe(false);
    await readAlertInputs(recorded.db, { checksFor: { service: 'orders', scope: 'POST /idle' } });
    const idle = recorded.statements.find((statement) => statement.text === alertIdleLatencyText);
    // Its five latest busy minutes as stored (not counted back from the clock, which may have
    // passed a minute since they were written).
    const { rows: stored } = await db.pool.query<{ minute: Date }>("SELECT minute FROM flow_counts_minute WHERE scope = 'POST /idle' ORDER BY minute DESC LIMIT 5");
    expect(idle?.values.slice(0, 2)).toEqual([['orders'], 'POST /idle']);
    expect((idle?.values[2] as Date[]).map((minute) => minute.getTime())).toEqual(stored.map((row) => row.minute.getTime()).reverse());
    // Each with its one bucket of 50 claims.
    const idleRows = (await db.pool.query<{ buckets: number[]; counts: number[] }>(alertIdleLatencyText, [...(idle?.values ?? [])])).rows;
    expect(idleRows.map((row) => [row.buckets, row.counts.map(Number)])).toEqual(new Array(5).fill([[20], [50]]));
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      for (const analyzed of [false, true]) {
        if (analyzed) await client.query('ANALYZE claim_latency_series');
        for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
          const nodes = await analyze(client, alertIdleLatencyText, idle?.values ?? [], mode);
          expect({ analyzed, mode, seqScans: nodes.filter((node) => node['Node Type'] === 'Seq Scan') }).toEqual({ analyzed, mode, seqScans: [] });
          expect([...new Set(nodes.flatMap((node) => (node['Index Name'] === undefined ? [] : [node['Index Name']])))]).toEqual(['claim_latency_series_pkey']);
          // One probe of the key per minute on step, service, scope and minute: no other scope's,
          // step's or minute's rows are read, and nothing is filtered out after the index.
          const scans = nodes.filter((node) => node['Index Cond'] !== undefined);
          expect(scans.length).toBeGreaterThan(0);
          for (const scan of scans) expect({ mode, cond: /step = .*service = .*scope = .*at = /.test(scan['Index Cond'] ?? '') }).toEqual({ mode, cond: true });
          expect(nodes.reduce((sum, node) => sum + (node['Rows Removed by Filter'] ?? 0) + (node['Rows Removed by Index Recheck'] ?? 0), 0)).toBe(0);
          expect(scans.reduce((sum, node) => sum + (node['Actual Rows'] ?? 0) * (node['Actual Loops'] ?? 1), 0)).toBe(5);
        }
      }
    } finally {
      await client.end();
    }
  });

  it("reads for a service the last minutes its scopes were busy together, though none was busy alone", async () => {
    // Service pair: POST /a and POST /b at 12 claims each 8 to 14 minutes ago (24 together: busy,
    // each alone under the 20-claim minimum) at 102 ms; POST /a alone at 30 claims 20 to 22
    // minutes ago at 3.2 ms. Nothing since.
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', 'pair', s, 'new', n
       FROM (SELECT s, m, 12 AS n FROM unnest(ARRAY['POST /a', 'POST /b']) AS s, generate_series(8, 14) AS m UNION ALL SELECT 'POST /a', m, 30 FROM generate_series(20, 22) AS m) AS t;
       INSERT INTO claim_latency_minute (minute, service, scope, bucket, count)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', 'pair', s, CASE WHEN m >= 20 THEN 10 ELSE 20 END, n
       FROM (SELECT s, m, 12 AS n FROM unnest(ARRAY['POST /a', 'POST /b']) AS s, generate_series(8, 14) AS m UNION ALL SELECT 'POST /a', m, 30 FROM generate_series(20, 22) AS m) AS t`,
    );
    await rebuildSeries(db.pool);
    const p99Check = async (choice: { service: string; scope?: string }) =>
      (await readOverview(db.pool, overviewQuery.parse({ range: '1h', ...choice }))).checks.find((check) => check.name === 'claim_p99');
    expect(await p99Check({ service: 'pair' })).toMatchObject({ firing: false, value: '102 ms (last busy minutes)' });
    expect(await p99Check({ service: 'pair', scope: 'POST /a' })).toMatchObject({ firing: false, value: '3.2 ms (last busy minutes)' });
    // The histograms read for the service: its level's five busy minutes (8 to 12 minutes ago).
    const recorded = recordingQueryable(db.pool);
    await readAlertInputs(recorded.db, { checksFor: { service: 'pair' } });
    const idle = recorded.statements.find((statement) => statement.text === alertIdleLatencyText);
    expect(idle?.values.slice(0, 2)).toEqual([['pair'], '*']);
    expect((idle?.values[2] as Date[]).length).toBe(5);
  });
});

describe('alert inputs: the counts read', () => {
  const db = useTestDatabase();
  const scopes = 50;

  it("reads every scope's counts over the rules' windows only, not the 30-minute look-back, through the primary key", async () => {
    // 30 minutes of 50 busy scopes, three outcomes each.
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', 'demo', 'POST /s-' || s, o, 100
       FROM generate_series(0, 29) AS m, generate_series(1, ${scopes}) AS s, unnest(ARRAY['new', 'replay', 'conflict']) AS o`,
    );
    // The longer window (5 min), the minute before it, and the minute now is in.
    const bound = (Math.max(alertThresholds.rateMinutes, alertThresholds.claimP99Minutes) + 2) * scopes * 3;
    for (const analyzed of [false, true]) {
      if (analyzed) await db.pool.query('ANALYZE flow_counts_minute');
      const recorded = recordingQueryable(db.pool);
      const inputs = await readAlertInputs(recorded.db);
      // Each scope's series spans the windows: its newest minute now, its oldest 6 minutes back.
      expect(inputs.flowByScope).toHaveLength(scopes);
      const spans = new Set(inputs.flowByScope?.map((series) => (inputs.now.getTime() - (series.points[0]?.at.getTime() ?? 0)) / 60_000));
      expect([...spans].every((minutes) => minutes > 5 && minutes <= 7)).toBe(true);
      const statement = recorded.statements.find((recordedStatement) => recordedStatement.text === alertCountsText);
      expect(statement).toBeDefined();
      await expectKeyRangeRead(db.url, alertCountsText, statement?.values ?? [], 'flow_counts_minute', bound, analyzed);
    }
  });
});

describe('alert inputs: an idle choice read', () => {
  const db = useTestDatabase();
  const idleScopes = 10;

  it("reads an idle checked choice's look-back with its service and scope inside the primary-key range", async () => {
    // Ten scopes in two services busy 10 to 29 minutes ago (so every choice is idle in the
    // windows), three outcomes each, and before that two days of minutes as the table keeps them
    // (the look-back is a small share of its rows).
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', v, 'POST /i-' || s, o, 100
       FROM generate_series(10, 29) AS m, generate_series(1, ${idleScopes}) AS s, unnest(ARRAY['demo', 'orders']) AS v, unnest(ARRAY['new', 'replay', 'conflict']) AS o;
       INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', v, 'POST /i-' || s, 'new', 100
       FROM generate_series(31, 2880) AS m, generate_series(1, ${idleScopes}) AS s, unnest(ARRAY['demo', 'orders']) AS v`,
    );
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      for (const analyzed of [false, true]) {
        if (analyzed) await db.pool.query('ANALYZE flow_counts_minute');
        for (const [choice, rowsOfChoice] of [
          [{ service: 'orders', scope: 'POST /i-7' }, 20 * 3],
          [{ scope: 'POST /i-7' }, 2 * 20 * 3],
          [{ service: 'orders' }, idleScopes * 20 * 3],
        ] as const) {
          const recorded = recordingQueryable(db.pool);
          const inputs = await readAlertInputs(recorded.db, { checksFor: choice });
          // Its 20 busy minutes, summed over its rows (300 claims a minute and scope in each service).
          expect(inputs.idleChoice?.points).toHaveLength(20);
          const text = alertChoiceFlowText(choice);
          const statement = recorded.statements.find((recordedStatement) => recordedStatement.text === text);
          expect(statement).toBeDefined();
          for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
            const nodes = await analyze(client, text, statement?.values ?? [], mode);
            const onCounts = nodes.filter((node) => node['Relation Name'] === 'flow_counts_minute');
            expect({ analyzed, choice, mode, seqScans: onCounts.filter((node) => node['Node Type'] === 'Seq Scan') }).toEqual({ analyzed, choice, mode, seqScans: [] });
            // The service and scope are conditions of the key's index: only the choice's rows
            // leave it, and none is filtered out after.
            const conditions = nodes.filter((node) => node['Index Name'] === 'flow_counts_minute_pkey').map((node) => node['Index Cond'] ?? '');
            expect({ analyzed, choice, mode, indexes: [...new Set(nodes.flatMap((node) => (node['Index Name'] === undefined ? [] : [node['Index Name']])))] }).toEqual({
              analyzed,
              choice,
              mode,
              indexes: ['flow_counts_minute_pkey'],
            });
            for (const column of Object.keys(choice)) expect(conditions.join(' ')).toMatch(new RegExp(`${column} = `));
            expect(onCounts.reduce((sum, node) => sum + (node['Rows Removed by Filter'] ?? 0) + (node['Rows Removed by Index Recheck'] ?? 0), 0)).toBe(0);
            const read = onCounts.reduce((sum, node) => sum + (node['Actual Rows'] ?? 0) * (node['Actual Loops'] ?? 1), 0);
            expect({ analyzed, choice, mode, read }).toEqual({ analyzed, choice, mode, read: rowsOfChoice });
          }
        }
      }
    } finally {
      await client.end();
    }
  });
});

/**
 * Runs `text` with `values` under both plan cache modes on its own connection (so the mode it
 * sets never reaches the pool's) and expects every node on `table` to read its primary key,
 * nothing else, and at most `bound` rows in all (and some).
 */
async function expectKeyRangeRead(url: string, text: string, values: readonly unknown[], table: string, bound: number, analyzed: boolean): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
      const onTable = (await analyze(client, text, values, mode)).filter((node) => node['Relation Name'] === table);
      const offKey = onTable.filter((node) => node['Node Type'] === 'Seq Scan' || (node['Index Name'] !== undefined && node['Index Name'] !== `${table}_pkey`));
      expect({ analyzed, mode, offKey }).toEqual({ analyzed, mode, offKey: [] });
      const read = onTable.reduce((sum, node) => sum + (node['Actual Rows'] ?? 0) * (node['Actual Loops'] ?? 1), 0);
      expect({ analyzed, mode, read, within: read > 0 && read <= bound }).toEqual({ analyzed, mode, read, within: true });
    }
  } finally {
    await client.end();
  }
}
