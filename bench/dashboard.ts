// The overview in Chromium (issue #31, point 8): the time from navigation to the charts' first
// drawn line, per range, against `npm start`'s server with demo traffic and a day of history
// (a minute of flow per minute and a store sample per minute, as the demo keeps after running a
// day), at the demo's size and then with 10 M keys more in the key table (loadKeysInSql, the
// server stopped meanwhile). The target: 24 h median <= 700 ms.
// `npm run bench -- dashboard`; BENCH_DASHBOARD_LOADS sets the loads per range (default 9, after
// one warm-up), BENCH_DASHBOARD_SCALE_KEYS the keys of the second round (default 10,000,000; 0
// skips it).
import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { chromium, type BrowserContext } from 'playwright-core';
import type { EndpointPolicy } from '@retrysafe/store';
import { ensureDashboardLogin } from '../db/dashboard-access';
import { rebuildSeries } from '../server/metrics/series';
import { startServer } from './http';
import { openBenchDatabase } from './database';
import { keyTableIndexes, registerScalePolicies } from './scale-loader';
import { PAYMENTS_SCOPE, REFUNDS_SCOPE, SCALE_SERVICE } from './scale-rows';

const RANGES = ['1h', '6h', '24h', '7d', '30d'] as const;
const LOADS = Number(process.env.BENCH_DASHBOARD_LOADS ?? 9);
const SCALE_KEYS = Number(process.env.BENCH_DASHBOARD_SCALE_KEYS ?? 10_000_000);
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const DAY_MS = 86_400_000;
/** The loaded keys' policy (the scale bench's): live for a day, as a day of traffic leaves them. */
const SCALE_POLICY: EndpointPolicy = { scopeMode: 'endpoint', retryWindowMs: DAY_MS, retentionMs: DAY_MS, leaseMs: 30_000, lockTimeoutMs: 5_000, maxResponseBytes: 4_096, liveKeyQuota: 1_000_000_000 };

export interface DashboardRun {
  range: (typeof RANGES)[number];
  loads: number;
  /**
   * Navigation start to the first drawn chart line, ms: the server-rendered lines of the first
   * HTML (path.chart-line) or, whichever comes first, Recharts' own (path.recharts-curve).
   */
  medianMs: number;
  p90Ms: number;
  /** Navigation start to Recharts' interactive chart (axes, tooltips, zoom) replacing it after hydration, ms (median). */
  interactiveMs: number;
  /** Navigation start to the first paint of anything, ms (median). */
  firstPaintMs: number;
  /** Requests to /api/admin/overview the page made before its first chart line (0: the first HTML carried the data). */
  apiFetchesBeforeChart: number;
}

export interface DashboardReport {
  runs: DashboardRun[];
  storeRows: number;
  target: { range: '24h'; medianMs: 700; met: boolean };
  /** The same, with BENCH_DASHBOARD_SCALE_KEYS keys more (null when 0). */
  scale: { storeRows: number; loadSeconds: number; runs: DashboardRun[]; target: { range: '24h'; medianMs: 700; met: boolean } } | null;
}

const percentile = (values: number[], p: number) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor((p / 100) * values.length))] ?? NaN;

/** A day of flow (two scopes, replays and conflicts beside new keys) and a store sample a minute (the series are rebuilt after). */
async function seedDay(db: pg.Client): Promise<void> {
  await db.query(
    `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
     SELECT m, 'demo', s, o, (20 + 10 * sin(extract(epoch FROM m) / 3600))::int * (CASE o WHEN 'new' THEN 10 WHEN 'replay' THEN 2 ELSE 1 END)
     FROM generate_series(date_trunc('minute', now()) - interval '1 day', date_trunc('minute', now()) - interval '1 minute', interval '1 minute') AS m,
          (VALUES ('POST /api/v1/payments'), ('POST /api/v1/refunds')) AS scopes(s),
          (VALUES ('new'), ('replay'), ('conflict')) AS outcomes(o)
     ON CONFLICT DO NOTHING;
     INSERT INTO store_stats (sampled_at, estimated_rows, baseline_rows, table_bytes, index_bytes, toast_bytes, oldest_row_age_seconds, cleanup_lag_seconds, stale_claims)
     SELECT m, 50000 + (5000 * sin(extract(epoch FROM m) / 7200))::int, 52000, 40000000, 12000000, 0, 90000, 20, 0
     FROM generate_series(date_trunc('minute', now()) - interval '1 day', date_trunc('minute', now()) - interval '2 minutes', interval '1 minute') AS m
     ON CONFLICT DO NOTHING;`,
  );
}

export async function benchDashboard(adminUrl: string, log: (line: string) => void): Promise<DashboardReport> {
  const database = await openBenchDatabase({ adminUrl });
  const admin = new pg.Client({ connectionString: database.url });
  await admin.connect();
  const dashboardUrl = await ensureDashboardLogin(admin, database.url, randomBytes(18).toString('base64url'));
  await seedDay(admin);
  const seriesPool = new pg.Pool({ connectionString: database.url, max: 1 });
  await rebuildSeries(seriesPool);
  await seriesPool.end();
  const password = randomBytes(12).toString('base64url');
  const browser = await chromium.launchPersistentContext(await mkdtemp(join(tmpdir(), 'retrysafe-bench-chromium-')), {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1280, height: 800 },
  });
  const keyCount = async () => Number((await admin.query<{ n: string }>('SELECT count(*) AS n FROM idempotency_keys')).rows[0]?.n ?? 0);
  const targetOf = (runs: DashboardRun[]) => {
    const day = runs.find((run) => run.range === '24h');
    return { day, target: { range: '24h' as const, medianMs: 700 as const, met: day !== undefined && day.medianMs <= 700 } };
  };
  try {
    const measureRound = async () => {
      const server = await startServer(database.url, dashboardUrl, log, { DEMO_TRAFFIC: '1', ADMIN_PASSWORD: password, LOG_LEVEL: 'warn' });
      try {
        return await measure(browser, server.baseUrl, password, log);
      } catch (error) {
        // What the server said last (a crash, a refusal): the bench's error alone does not say why.
        log(`  the server's last output:\n${server.output().split('\n').slice(-40).join('\n')}`);
        throw error;
      } finally {
        await server.stop();
      }
    };
    const runs = await measureRound();
    const storeRows = await keyCount();
    const { day, target } = targetOf(runs);
    log(`  store: ${storeRows} keys (the demo's own traffic), a day of flow and store samples`);
    log(`  24 h median ${day?.medianMs ?? NaN} ms against the 700 ms target: ${target.met ? 'met' : 'NOT met'}`);
    let scale: DashboardReport['scale'] = null;
    if (SCALE_KEYS > 0) {
      log(`\n  loading ${SCALE_KEYS.toLocaleString('en')} keys (service orders, expiring over the next day) in SQL, the server stopped...`);
      const loadPool = new pg.Pool({ connectionString: database.url, max: availableParallelism() + 1 });
      try {
        await registerScalePolicies(loadPool, SCALE_POLICY);
        const load = await loadKeysInSql(loadPool, SCALE_KEYS, availableParallelism());
        log(`  loaded in ${load.totalSeconds.toFixed(0)} s (INSERT ${load.insertSeconds.toFixed(0)} s, indexes ${load.indexSeconds.toFixed(0)} s, VACUUM ANALYZE ${load.vacuumSeconds.toFixed(0)} s)`);
        const scaleRuns = await measureRound();
        const scaleRows = await keyCount();
        const scaled = targetOf(scaleRuns);
        log(`  store: ${scaleRows.toLocaleString('en')} keys`);
        log(`  24 h median ${scaled.day?.medianMs ?? NaN} ms at ${scaleRows.toLocaleString('en')} keys against the 700 ms target: ${scaled.target.met ? 'met' : 'NOT met'}`);
        scale = { storeRows: scaleRows, loadSeconds: load.totalSeconds, runs: scaleRuns, target: scaled.target };
      } finally {
        await loadPool.end();
      }
    }
    return { runs, storeRows, target, scale };
  } finally {
    await browser.close();
    await admin.end();
    await database.close();
  }
}

/**
 * `count` keys of the scale bench's service and scopes written by INSERT ... SELECT inside
 * Postgres, `streams` statements at once, with the key table's indexes dropped first and built
 * again after (as bench/scale-loader.ts does), then VACUUM ANALYZE: expiring over the next day
 * (created over the last one), one in a thousand a stale claim, the others completed with a
 * 96-byte stand-in body. Quicker than the scale loader's sealed rows (the overview reads no
 * body or fingerprint, only the table's size, its statistics and its indexes).
 */
export async function loadKeysInSql(pool: pg.Pool, count: number, streams: number): Promise<{ insertSeconds: number; indexSeconds: number; vacuumSeconds: number; totalSeconds: number }> {
  const began = performance.now();
  const indexes = await keyTableIndexes(pool);
  for (const index of indexes) {
    if (index.constraint) await pool.query(`ALTER TABLE retrysafe.idempotency_keys DROP CONSTRAINT ${index.name}`);
    else await pool.query(`DROP INDEX retrysafe.${index.name}`);
  }
  const per = Math.ceil(count / streams);
  await Promise.all(
    Array.from({ length: streams }, (_, stream) =>
      pool.query(
        `INSERT INTO retrysafe.idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, response_status,
           response_content_type, response_body, response_key_id, response_size, completed_at, created_at, expires_at)
         SELECT ('00000000-0000-0000-0000-' || lpad((i % 5000)::text, 12, '0'))::uuid, $3, CASE WHEN i % 4 = 0 THEN $5 ELSE $4 END, 'bench-' || i,
                CASE WHEN i % 1000 = 0 THEN 'in_progress' ELSE 'completed' END, decode(md5(i::text) || md5((i + 1)::text), 'hex'), gen_random_uuid(),
                CASE WHEN i % 1000 = 0 THEN now() - interval '1 minute' END, CASE WHEN i % 1000 = 0 THEN NULL ELSE 201 END, 'application/json',
                CASE WHEN i % 1000 = 0 THEN NULL ELSE decode(repeat(md5(i::text), 6), 'hex') END, CASE WHEN i % 1000 = 0 THEN NULL ELSE 'k1' END,
                CASE WHEN i % 1000 = 0 THEN NULL ELSE 96 END, CASE WHEN i % 1000 = 0 THEN NULL ELSE c END, c, c + interval '1 day'
         FROM generate_series($1::bigint, $2::bigint) AS i, LATERAL (SELECT now() - interval '1 day' + (i::float8 / $6) * interval '1 day' + interval '1 minute' AS c) AS t`,
        [stream * per, Math.min(count, (stream + 1) * per) - 1, SCALE_SERVICE, PAYMENTS_SCOPE, REFUNDS_SCOPE, count],
      ),
    ),
  );
  const indexBegan = performance.now();
  const client = await pool.connect();
  try {
    await client.query(`SET maintenance_work_mem = '256MB'`);
    for (const index of indexes) await client.query(index.constraint ?? index.definition);
    const vacuumBegan = performance.now();
    await client.query('VACUUM (ANALYZE) retrysafe.idempotency_keys');
    const done = performance.now();
    return { insertSeconds: (indexBegan - began) / 1000, indexSeconds: (vacuumBegan - indexBegan) / 1000, vacuumSeconds: (done - vacuumBegan) / 1000, totalSeconds: (done - began) / 1000 };
  } finally {
    client.release();
  }
}

/** Signs in to the server at `baseUrl` and loads the overview LOADS times per range (after a warm-up each). */
async function measure(browser: BrowserContext, baseUrl: string, password: string, log: (line: string) => void): Promise<DashboardRun[]> {
  const signIn = await fetch(`${baseUrl}/api/auth/sign-in`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', origin: baseUrl },
    body: JSON.stringify({ email: 'bench@example.com', password }),
  });
  if (signIn.status !== 204) throw new Error(`sign-in answered ${signIn.status}`);
  await browser.addCookies(
    signIn.headers.getSetCookie().map((line) => {
      const pair = line.split(';')[0] ?? '';
      return { name: pair.slice(0, pair.indexOf('=')), value: pair.slice(pair.indexOf('=') + 1), url: baseUrl, httpOnly: true, sameSite: 'Strict' as const };
    }),
  );
  const runs: DashboardRun[] = [];
  for (const range of RANGES) {
    const times: number[] = [];
    const paints: number[] = [];
    const interactive: number[] = [];
    let fetches = 0;
    for (let load = 0; load <= LOADS; load += 1) {
      const page = await browser.newPage();
      let apiCalls = 0;
      page.on('request', (request) => {
        if (request.url().includes('/api/admin/overview')) apiCalls += 1;
      });
      await page.goto(`${baseUrl}/?range=${range}&refresh=off`, { waitUntil: 'commit' });
      // Checked every animation frame from the first byte: the frame's time is when the line was drawn.
      const chartAt = await page
        .waitForFunction(() => (document.querySelector('.chart path.chart-line, .chart path.recharts-curve') ? performance.now() : false), undefined, { timeout: 30_000, polling: 'raf' })
        .then((handle) => handle.jsonValue() as Promise<number>)
        .catch(async (error: unknown) => {
          const seen = await page.evaluate(() => ({ figures: document.querySelectorAll('.chart').length, svgs: document.querySelectorAll('.chart svg').length, curves: document.querySelectorAll('path.recharts-curve').length, empty: [...document.querySelectorAll('.chart .empty')].map((node) => node.textContent) }));
          throw new Error(`no chart line at ${page.url()}: ${JSON.stringify(seen)}`, { cause: error });
        });
      const interactiveAt = await page
        .waitForFunction(() => (document.querySelector('.chart path.recharts-curve') ? performance.now() : false), undefined, { timeout: 30_000, polling: 'raf' })
        .then((handle) => handle.jsonValue() as Promise<number>);
      const measured = { chart: chartAt, interactive: interactiveAt, paint: await page.evaluate(() => performance.getEntriesByType('paint').find((entry) => entry.name === 'first-paint')?.startTime ?? NaN) };
      // The first load of each range warms the server's code path and statements.
      if (load > 0) {
        times.push(measured.chart);
        paints.push(measured.paint);
        interactive.push(measured.interactive);
        fetches = Math.max(fetches, apiCalls);
      }
      await page.close();
    }
    const run: DashboardRun = { range, loads: times.length, medianMs: Math.round(percentile(times, 50)), p90Ms: Math.round(percentile(times, 90)), interactiveMs: Math.round(percentile(interactive, 50)), firstPaintMs: Math.round(percentile(paints, 50)), apiFetchesBeforeChart: fetches };
    runs.push(run);
    log(`  ${range.padEnd(4)} first chart line: median ${run.medianMs} ms, p90 ${run.p90Ms} ms; interactive chart: median ${run.interactiveMs} ms (first paint ${run.firstPaintMs} ms, API fetches before it: ${run.apiFetchesBeforeChart}), ${run.loads} loads`);
  }
  return runs;
}
