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
import { flowEvents } from '../../packages/store/test/helpers/flow-events';

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

  it("rolls minute buckets up into hours without double counting, then expires hours and the principals' rows past their retention", async () => {
    await db.pool.query('TRUNCATE flow_counts_minute, claim_latency_minute, flow_counts_hour, claim_latency_hour, flow_counts_series, claim_latency_series, principal_flow_minute, principal_flow_hour, principal_flow_day');
    // The principals' rows past their retention (3 h, 27 h, 40 d) and within it (1 h, 25 h, 34 d).
    for (const [table, column, unit, ages] of [
      ['principal_flow_minute', 'minute', 'hour', [1, 3]],
      ['principal_flow_hour', 'hour', 'hour', [25, 27]],
      ['principal_flow_day', 'day', 'day', [34, 40]],
    ] as const) {
      await db.pool.query(
        `INSERT INTO ${table} (service, scope, ${column}, outcome, principal_id, count)
         SELECT 'demo', 'POST /x', date_bin('1 ${unit}', now(), timestamptz 'epoch') - a * interval '1 ${unit}', 'claims', $1::uuid, 1 FROM unnest($2::int[]) AS a`,
        [randomUUID(), ages],
      );
    }
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
    expect(first).toEqual({ ran: true, minuteRowsRolledUp: 120, hourRowsExpired: 1, seriesRowsExpired: 2 * 3 * (60 + 12 + 4) + 2 * 3, principalRowsExpired: 3 });
    expect(second).toEqual({ ran: true, minuteRowsRolledUp: 0, hourRowsExpired: 0, seriesRowsExpired: 0, principalRowsExpired: 0 });
    for (const table of ['principal_flow_minute', 'principal_flow_hour', 'principal_flow_day']) expect([table, (await db.pool.query(`SELECT 1 FROM ${table}`)).rowCount]).toEqual([table, 1]);
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

  it("stores the principals behind each outcome within N/(k+1) of the exact counts, summed across two recorders, in minutes, hours and days, and merges hours and days to top-k", async () => {
    await db.pool.query('TRUNCATE principal_flow_minute, principal_flow_hour, principal_flow_day');
    const k = 5;
    // This minute, so the roll-up merges its hour and its day (the ones flushes still add to).
    const minute = Math.floor(Date.now() / 60_000) * 60_000;
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
    // The flush wrote the same counters to the minute's hour and day.
    expect(await read('principal_flow_hour')).toEqual(minutes);
    expect(await read('principal_flow_day')).toEqual(minutes);
    // The heavy principal leads refunds' conflicts, and the store's ('*').
    const conflicts = (scope: string) => [...minutes].filter(([key]) => key.startsWith(`${scope}|conflict|`)).sort((a, b) => b[1] - a[1]);
    expect(conflicts('POST /refunds')[0]?.[0]).toBe(`POST /refunds|conflict|${heavy}`);
    expect(conflicts(ALL)[0]?.[0]).toBe(`${ALL}|conflict|${heavy}`);
    const store = await db.pool.query<{ n: string }>("SELECT count(*) AS n FROM principal_flow_minute WHERE service = '*' AND scope = '*'");
    expect(Number(store.rows[0]?.n)).toBeGreaterThan(0);

    // Rolled up: the hour and the day merged down to k counters, still within the bound; the
    // minutes kept as they are (within their retention).
    await rollUpFlowMetrics(db.pool, { minuteRetentionMs: 48 * 3_600_000, hourRetentionMs: 3_650 * 86_400_000, principalTopK: k });
    expect(await read('principal_flow_minute')).toEqual(minutes);
    for (const [table, column] of [['principal_flow_hour', 'hour'], ['principal_flow_day', 'day']] as const) {
      const perGroup = await db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${table} GROUP BY service, scope, ${column}, outcome`);
      expect(perGroup.rows.length).toBeGreaterThan(0);
      for (const row of perGroup.rows) expect(Number(row.n), table).toBeLessThanOrEqual(k);
      const merged = await read(table);
      checkBound(merged);
      expect([...merged].filter(([key]) => key.startsWith('POST /refunds|conflict|')).sort((a, b) => b[1] - a[1])[0]?.[0]).toBe(`POST /refunds|conflict|${heavy}`);
    }
  });

  it("merges a principals' hour to top-k without losing what a flush adds to it meanwhile", async () => {
    await db.pool.query('TRUNCATE principal_flow_minute, principal_flow_hour, principal_flow_day');
    const [a, b, c] = [randomUUID(), randomUUID(), randomUUID()];
    // This hour: a 72 conflicts, b 48, c 1; k = 2 keeps a and b less the third largest (1).
    await db.pool.query(
      `INSERT INTO principal_flow_hour (service, scope, hour, outcome, principal_id, count)
       SELECT 'demo', 'POST /x', date_bin('1 hour', now(), timestamptz 'epoch'), 'conflict', p, n FROM (VALUES ($1::uuid, 72), ($2::uuid, 48), ($3::uuid, 1)) AS t(p, n)`,
      [a, b, c],
    );
    // A flush adds 100 to c and has not committed when the roll-up starts: the merge waits for
    // it and ranks c with them (c 101, a 72, b 48: c and a kept, less 48), rather than dropping
    // c's row, with the 100 in it, as the third.
    const flush = await db.pool.connect();
    try {
      await flush.query('BEGIN');
      await flush.query("UPDATE principal_flow_hour SET count = count + 100 WHERE principal_id = $1", [c]);
      const rollUp = rollUpFlowMetrics(db.pool, { minuteRetentionMs: 48 * 3_600_000, hourRetentionMs: 35 * 86_400_000, principalTopK: 2 });
      await expect.poll(async () => (await db.pool.query("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%principal_flow_hour%' AND pid <> pg_backend_pid()")).rowCount, { timeout: 5_000 }).toBe(1);
      await flush.query('COMMIT');
      await rollUp;
    } finally {
      flush.release();
    }
    const { rows } = await db.pool.query<{ principal_id: string; count: string }>('SELECT principal_id, count FROM principal_flow_hour ORDER BY count DESC');
    expect(rows.map((row) => [row.principal_id, Number(row.count)])).toEqual([
      [c, 53],
      [a, 24],
    ]);
  });
});
