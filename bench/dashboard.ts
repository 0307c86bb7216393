// The overview in Chromium (issue #31, point 8): the time from navigation to the charts' first
// drawn line, per range, against `npm start`'s server with demo traffic and a day of history
// (a minute of flow per minute and a store sample per minute, as the demo keeps after running a
// day). The target: 24 h median <= 700 ms. `npm run bench -- dashboard`; BENCH_DASHBOARD_LOADS
// sets the loads per range (default 9, after one warm-up).
import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { chromium } from 'playwright-core';
import { ensureDashboardLogin } from '../db/dashboard-access';
import { rebuildSeries } from '../server/metrics/series';
import { startServer } from './http';
import { openBenchDatabase } from './database';

const RANGES = ['1h', '6h', '24h', '7d', '30d'] as const;
const LOADS = Number(process.env.BENCH_DASHBOARD_LOADS ?? 9);
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';

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
  const server = await startServer(database.url, dashboardUrl, log, { DEMO_TRAFFIC: '1', ADMIN_PASSWORD: password, LOG_LEVEL: 'warn' });
  const browser = await chromium.launchPersistentContext(await mkdtemp(join(tmpdir(), 'retrysafe-bench-chromium-')), {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1280, height: 800 },
  });
  try {
    const signIn = await fetch(`${server.baseUrl}/api/auth/sign-in`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin: server.baseUrl },
      body: JSON.stringify({ email: 'bench@example.com', password }),
    });
    if (signIn.status !== 204) throw new Error(`sign-in answered ${signIn.status}`);
    await browser.addCookies(
      signIn.headers.getSetCookie().map((line) => {
        const pair = line.split(';')[0] ?? '';
        return { name: pair.slice(0, pair.indexOf('=')), value: pair.slice(pair.indexOf('=') + 1), url: server.baseUrl, httpOnly: true, sameSite: 'Strict' as const };
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
        await page.goto(`${server.baseUrl}/?range=${range}&refresh=off`, { waitUntil: 'commit' });
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
    const { rows } = await admin.query<{ n: string }>('SELECT count(*) AS n FROM idempotency_keys');
    const day = runs.find((run) => run.range === '24h');
    const met = day !== undefined && day.medianMs <= 700;
    log(`  store: ${rows[0]?.n ?? 0} keys (the demo's own traffic), a day of flow and store samples`);
    log(`  24 h median ${day?.medianMs ?? NaN} ms against the 700 ms target: ${met ? 'met' : 'NOT met'}`);
    return { runs, storeRows: Number(rows[0]?.n ?? 0), target: { range: '24h', medianMs: 700, met } };
  } finally {
    await browser.close();
    await server.stop();
    await admin.end();
    await database.close();
  }
}
