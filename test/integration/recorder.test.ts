// The flow recorder: counts from several processes add up exactly in the stored buckets,
// and percentiles read from the merged histogram are within one bucket of the truth.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { ALL, BUCKET_COUNT, bucketOf, percentileOf, type ClaimOutcome } from '@retrysafe/store';
import { FlowRecorder } from '@retrysafe/store';
import { rollUpFlowMetrics } from '../../server/metrics/rollup';
import { rebuildSeries } from '../../server/metrics/series';
import { useTestDatabase } from '../helpers/database';
import { flowEvents } from '../helpers/flow-events';

const run = promisify(execFile);
const FIXED_MINUTE = Date.UTC(2026, 0, 1, 12, 0, 0);

describe('flow recorder', () => {
  const db = useTestDatabase();

  it('adds the counts of two processes exactly', async () => {
    await db.pool.query('TRUNCATE flow_counts_minute, claim_latency_minute');
    await Promise.all([
      run(process.execPath, ['--conditions=retrysafe-source', '--import', 'tsx', 'test/fixtures/record-flow.ts', db.url, '11', '3000']),
      run(process.execPath, ['--conditions=retrysafe-source', '--import', 'tsx', 'test/fixtures/record-flow.ts', db.url, '12', '2000']),
    ]);
    const expected = new Map<string, number>();
    const expectedLatency = new Map<string, number>();
    for (const [seed, count] of [[11, 3000], [12, 2000]] as const) {
      for (const event of flowEvents(seed, count)) {
        const cell = `${event.service}|${event.scope}|${event.outcome}`;
        expected.set(cell, (expected.get(cell) ?? 0) + 1);
        if (event.claimLatencyMs !== undefined) {
          const key = `${event.service}|${event.scope}|${bucketOf(event.claimLatencyMs)}`;
          expectedLatency.set(key, (expectedLatency.get(key) ?? 0) + 1);
        }
      }
    }
    // The stream has two services: their counts are kept apart, cell by cell.
    expect(new Set([...expected.keys()].map((cell) => cell.split('|')[0]))).toEqual(new Set(['demo', 'orders']));
    const { rows } = await db.pool.query<{ service: string; scope: string; outcome: string; count: string; minute: Date }>('SELECT * FROM flow_counts_minute');
    expect(rows).toHaveLength(expected.size);
    expect(new Map(rows.map((row) => [`${row.service}|${row.scope}|${row.outcome}`, Number(row.count)]))).toEqual(expected);
    expect(new Set(rows.map((row) => row.minute.getTime()))).toEqual(new Set([FIXED_MINUTE]));
    const latency = await db.pool.query<{ service: string; scope: string; bucket: number; count: string }>('SELECT service, scope, bucket, count FROM claim_latency_minute');
    expect(latency.rows).toHaveLength(expectedLatency.size);
    expect(new Map(latency.rows.map((row) => [`${row.service}|${row.scope}|${row.bucket}`, Number(row.count)]))).toEqual(expectedLatency);
  });

  it('gives percentiles from merged histograms within one bucket of the raw percentiles', async () => {
    await db.pool.query('TRUNCATE flow_counts_minute, claim_latency_minute');
    const recorders = [new FlowRecorder(db.pool, { now: () => FIXED_MINUTE }), new FlowRecorder(db.pool, { now: () => FIXED_MINUTE })];
    const raw: number[] = [];
    let i = 0;
    for (const event of flowEvents(99, 20_000)) {
      if (event.claimLatencyMs === undefined) continue;
      raw.push(event.claimLatencyMs);
      recorders[i % 2]?.record({ ...event, service: 'demo', scope: 'POST /x' });
      i += 1;
    }
    await Promise.all(recorders.map((recorder) => recorder.stop()));
    const { rows } = await db.pool.query<{ bucket: number; count: string }>("SELECT bucket, sum(count) AS count FROM claim_latency_minute WHERE scope = 'POST /x' GROUP BY bucket");
    const merged = new Array<number>(BUCKET_COUNT).fill(0);
    for (const row of rows) merged[row.bucket] = Number(row.count);
    raw.sort((a, b) => a - b);
    for (const p of [50, 95, 99]) {
      const truth = raw[Math.ceil((p / 100) * raw.length) - 1] ?? NaN;
      const estimate = percentileOf(merged, p);
      expect(Math.abs(bucketOf(estimate) - bucketOf(truth))).toBeLessThanOrEqual(1);
      expect(estimate).toBeGreaterThanOrEqual(truth);
    }
  });

  it('rolls minute buckets up into hours without double counting, then expires hours', async () => {
    await db.pool.query('TRUNCATE flow_counts_minute, claim_latency_minute, flow_counts_hour, claim_latency_hour, flow_counts_series, claim_latency_series');
    await db.pool.query(`
      INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
      SELECT date_trunc('hour', now() - interval '3 days') + m * interval '1 minute', 'demo', 'POST /x', 'new', 2 FROM generate_series(0, 59) AS m;
      INSERT INTO claim_latency_minute (minute, service, scope, bucket, count)
      SELECT date_trunc('hour', now() - interval '3 days') + m * interval '1 minute', 'demo', 'POST /x', 10, 3 FROM generate_series(0, 59) AS m;
      INSERT INTO flow_counts_minute (minute, service, scope, outcome, count) VALUES (date_trunc('minute', now()), 'demo', 'POST /x', 'new', 5);
      INSERT INTO flow_counts_hour (hour, service, scope, outcome, count) VALUES (date_trunc('hour', now() - interval '60 days'), 'demo', 'POST /x', 'new', 9);`);
    await rebuildSeries(db.pool);
    const options = { minuteRetentionMs: 48 * 3_600_000, hourRetentionMs: 35 * 86_400_000 };
    const first = await rollUpFlowMetrics(db.pool, options);
    const second = await rollUpFlowMetrics(db.pool, options);
    // The series expire by step: the 3-day-old minutes at the 60, 300 and 900 s steps (60 + 12 + 4
    // bins, three levels, counts and latency), the 60-day-old hour at the 3600 and 21600 s steps.
    expect(first).toEqual({ ran: true, minuteRowsRolledUp: 120, hourRowsExpired: 1, seriesRowsExpired: 2 * 3 * (60 + 12 + 4) + 2 * 3 });
    expect(second).toEqual({ ran: true, minuteRowsRolledUp: 0, hourRowsExpired: 0, seriesRowsExpired: 0 });
    // The move from minutes to hours leaves the series as they were: the store's, per step.
    const series = await db.pool.query<{ step: number; count: string }>(
      "SELECT step, sum(count) AS count FROM flow_counts_series WHERE service = '*' AND scope = '*' GROUP BY step ORDER BY step",
    );
    expect(series.rows).toEqual([
      { step: 60, count: '5' },
      { step: 300, count: '5' },
      { step: 900, count: '5' },
      { step: 3600, count: '125' },
      { step: 21600, count: '125' },
    ]);
    const hours = await db.pool.query<{ count: string }>('SELECT count FROM flow_counts_hour');
    expect(hours.rows).toEqual([{ count: '120' }]);
    const latency = await db.pool.query<{ bucket: number; count: string }>('SELECT bucket, count FROM claim_latency_hour');
    expect(latency.rows).toEqual([{ bucket: 10, count: '180' }]);
    const recent = await db.pool.query('SELECT 1 FROM flow_counts_minute');
    expect(recent.rowCount).toBe(1);
  });

  it("stores the principals behind each outcome within N/(k+1) of the exact counts, summed across two recorders, and rolls them into top-k hours", async () => {
    await db.pool.query('TRUNCATE principal_flow_minute, principal_flow_hour');
    const k = 5;
    const minute = Date.UTC(2026, 0, 1, 12, 0, 0);
    const recorders = [new FlowRecorder(db.pool, { now: () => minute, principalTopK: k }), new FlowRecorder(db.pool, { now: () => minute, principalTopK: k })];
    const principals = Array.from({ length: 200 }, () => randomUUID());
    const heavy = principals[0] ?? '';
    const exact = new Map<string, number>();
    const totals = new Map<string, number>();
    const count = (key: string, map = exact) => map.set(key, (map.get(key) ?? 0) + 1);
    let state = 42;
    const random = () => ((state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    for (let i = 0; i < 6_000; i += 1) {
      const scope = i % 3 === 0 ? 'POST /refunds' : 'POST /payments';
      // Refunds: one principal sends most conflicts; payments: many principals, few conflicts.
      const principalId = scope === 'POST /refunds' && random() < 0.6 ? heavy : (principals[1 + Math.floor(random() * 199)] ?? heavy);
      const outcome: ClaimOutcome = (principalId === heavy ? random() < 0.4 : random() < 0.03) ? 'conflict' : 'new';
      recorders[i % 2]?.record({ service: 'demo', scope, principalId, outcome });
      for (const [s, o] of [[scope, 'claims'], [ALL, 'claims'], ...(outcome === 'conflict' ? [[scope, 'conflict'], [ALL, 'conflict']] : [])]) {
        count(`${s}|${o}|${principalId}`);
        count(`${s}|${o}`, totals);
      }
      if (i % 700 === 0) await Promise.all(recorders.map((recorder) => recorder.flush()));
    }
    await Promise.all(recorders.map((recorder) => recorder.stop()));
    const read = async (table: string) =>
      new Map(
        (await db.pool.query<{ scope: string; outcome: string; principal_id: string; count: string }>(`SELECT scope, outcome, principal_id, sum(count) AS count FROM ${table} WHERE service = 'demo' GROUP BY 1, 2, 3`)).rows.map((row) => [
          `${row.scope}|${row.outcome}|${row.principal_id}`,
          Number(row.count),
        ]),
      );
    const checkBound = (stored: Map<string, number>) => {
      for (const [key, truth] of exact) {
        const [scope, outcome] = key.split('|');
        const bound = (totals.get(`${scope}|${outcome}`) ?? 0) / (k + 1);
        const estimate = stored.get(key) ?? 0;
        expect(estimate, key).toBeLessThanOrEqual(truth);
        expect(truth - estimate, key).toBeLessThanOrEqual(bound);
      }
      for (const key of stored.keys()) expect(exact.has(key), key).toBe(true);
    };
    const minutes = await read('principal_flow_minute');
    checkBound(minutes);
    // The heavy principal leads refunds' conflicts, and the store's ('*').
    const conflicts = (scope: string) => [...minutes].filter(([key]) => key.startsWith(`${scope}|conflict|`)).sort((a, b) => b[1] - a[1]);
    expect(conflicts('POST /refunds')[0]?.[0]).toBe(`POST /refunds|conflict|${heavy}`);
    expect(conflicts(ALL)[0]?.[0]).toBe(`${ALL}|conflict|${heavy}`);
    const store = await db.pool.query<{ n: string }>("SELECT count(*) AS n FROM principal_flow_minute WHERE service = '*' AND scope = '*'");
    expect(Number(store.rows[0]?.n)).toBeGreaterThan(0);

    // Rolled up (that minute is long past): hours merged down to k counters, still within the bound.
    const result = await rollUpFlowMetrics(db.pool, { minuteRetentionMs: 48 * 3_600_000, hourRetentionMs: 3_650 * 86_400_000, principalTopK: k });
    expect(result.minuteRowsRolledUp).toBeGreaterThanOrEqual(minutes.size);
    expect((await db.pool.query('SELECT 1 FROM principal_flow_minute')).rowCount).toBe(0);
    const perGroup = await db.pool.query<{ n: string }>('SELECT count(*) AS n FROM principal_flow_hour GROUP BY service, scope, hour, outcome');
    for (const row of perGroup.rows) expect(Number(row.n)).toBeLessThanOrEqual(k);
    const hours = await read('principal_flow_hour');
    checkBound(hours);
    expect([...hours].filter(([key]) => key.startsWith('POST /refunds|conflict|')).sort((a, b) => b[1] - a[1])[0]?.[0]).toBe(`POST /refunds|conflict|${heavy}`);
  });

  it("merges the principals' hours older than two days into days, down to k counters", async () => {
    await db.pool.query('TRUNCATE principal_flow_minute, principal_flow_hour');
    const [a, b, c] = [randomUUID(), randomUUID(), randomUUID()];
    // Three days ago, 24 hours: a 3 conflicts an hour, b 2, c 1 (c only in the first hour); and a recent hour.
    await db.pool.query(
      `INSERT INTO principal_flow_hour (service, scope, hour, outcome, principal_id, count)
       SELECT 'demo', 'POST /x', date_trunc('day', now() - interval '3 days') + h * interval '1 hour', 'conflict', p, n
       FROM generate_series(0, 23) AS h, (VALUES ($1::uuid, 3), ($2::uuid, 2)) AS t(p, n)
       UNION ALL SELECT 'demo', 'POST /x', date_trunc('day', now() - interval '3 days'), 'conflict', $3::uuid, 1
       UNION ALL SELECT 'demo', 'POST /x', date_trunc('hour', now() - interval '3 hours'), 'conflict', $1::uuid, 7`,
      [a, b, c],
    );
    const options = { minuteRetentionMs: 48 * 3_600_000, hourRetentionMs: 35 * 86_400_000, principalTopK: 2 };
    await rollUpFlowMetrics(db.pool, options);
    await rollUpFlowMetrics(db.pool, options);
    const { rows } = await db.pool.query<{ at: Date; principal_id: string; count: string }>('SELECT hour AS at, principal_id, count FROM principal_flow_hour ORDER BY hour, count DESC');
    const day = (await db.pool.query<{ day: Date }>("SELECT date_trunc('day', now() - interval '3 days') AS day")).rows[0]?.day;
    // a 72, b 48, c 1: k = 2 keeps a and b, less the third largest (1); the recent hour stays an hour.
    expect(rows.map((row) => [row.at.getTime(), row.principal_id, Number(row.count)])).toEqual([
      [day?.getTime(), a, 71],
      [day?.getTime(), b, 47],
      [expect.any(Number) as unknown, a, 7],
    ]);
  });
});
