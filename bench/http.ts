// The HTTP path end to end: the demo payments API (authentication, body validation, the store
// in transactional mode, the payment insert, the response) served by `npm start`'s server,
// beside a no-op route of the same server (POST /api/v1/ping: reads the body, answers 200), in
// the same run, at 8 and 32 connections, new keys and replays. The difference is what the API
// and the store add to what Next costs for any request. Load from autocannon, on loopback.
import { randomBytes, randomUUID } from 'node:crypto';
import autocannon from 'autocannon';
import pg from 'pg';
import { ensureDashboardLogin } from '../db/dashboard-access';
import { spawnStart, type RunningServer } from '../scripts/spawn-start';
import { createTenant } from '../server/demo/tenants';
import { openBenchDatabase } from './database';

const CONNECTIONS = [8, 32];
const SECONDS = Number(process.env.BENCH_HTTP_SECONDS ?? 10);
const REPLAY_KEYS = 2_000;

export interface HttpRun {
  route: string;
  connections: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
  non2xx: number;
  errors: number;
}

export interface HttpReport {
  runs: HttpRun[];
  /** Payments per second over no-op requests per second, per connections and keys. */
  ratios: { connections: number; keys: 'new' | 'replay'; ratio: number }[];
}

/** `npm start`'s server for a benchmark: throw-away secrets, no demo traffic, an instant processor; `extra` on top. */
export function startServer(databaseUrl: string, dashboardUrl: string, log: (line: string) => void, extra: Record<string, string> = {}): Promise<RunningServer> {
  log('  starting the server (builds first if the build is stale)...');
  return spawnStart({
    DATABASE_URL: databaseUrl,
    DASHBOARD_DATABASE_URL: dashboardUrl,
    IDEMPOTENCY_SECRET: randomBytes(32).toString('base64url'),
    RESPONSE_ENCRYPTION_KEYS: `b1:${randomBytes(32).toString('base64')}`,
    AUTH_SECRET: randomBytes(32).toString('base64url'),
    ADMIN_EMAIL: 'bench@example.com',
    ADMIN_PASSWORD: randomBytes(12).toString('base64url'),
    DEMO_TRAFFIC: '0',
    // The processor stand-in answers at once and never fails: the bench measures the path, not it.
    DEMO_PROCESSOR_LATENCY_MS: '0',
    DEMO_PROCESSOR_FAILURE_RATE: '0',
    LOG_LEVEL: 'warn',
    ...extra,
  });
}

function load(url: string, connections: number, request: autocannon.Request): Promise<autocannon.Result> {
  return new Promise((done, fail) => {
    autocannon({ url, connections, duration: SECONDS, requests: [request] }, (error: Error | null, result) => (error ? fail(error) : done(result)));
  });
}

export async function benchHttp(adminUrl: string, log: (line: string) => void): Promise<HttpReport> {
  const database = await openBenchDatabase({ adminUrl });
  const admin = new pg.Client({ connectionString: database.url });
  await admin.connect();
  const dashboardUrl = await ensureDashboardLogin(admin, database.url, randomBytes(18).toString('base64url'));
  const tenant = await createTenant(admin, `bench ${randomUUID().slice(0, 8)}`);
  await admin.end();
  const server = await startServer(database.url, dashboardUrl, log);
  const runs: HttpRun[] = [];
  try {
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${tenant.apiKey}` };
    const body = JSON.stringify({ amount: 1250, currency: 'EUR', description: 'Order 1234, two items' });
    const run = randomUUID().slice(0, 8);
    // The keys the replay runs read, made once through the API itself.
    for (let i = 0; i < REPLAY_KEYS; i += 1) {
      const response = await fetch(`${server.baseUrl}/api/v1/payments`, { method: 'POST', headers: { ...headers, 'idempotency-key': `replay-${run}-${i}` }, body });
      if (response.status !== 201) throw new Error(`making replay keys: ${response.status} ${await response.text()}`);
    }
    let counter = 0;
    const routes: { route: string; request: autocannon.Request }[] = [
      { route: 'no-op (POST /api/v1/ping)', request: { method: 'POST', path: '/api/v1/ping', headers, body } },
      {
        route: 'payments, new keys',
        request: { method: 'POST', path: '/api/v1/payments', headers, body, setupRequest: (request) => ({ ...request, headers: { ...headers, 'idempotency-key': `new-${run}-${(counter += 1)}` } }) },
      },
      {
        route: 'payments, replays',
        request: { method: 'POST', path: '/api/v1/payments', headers, body, setupRequest: (request) => ({ ...request, headers: { ...headers, 'idempotency-key': `replay-${run}-${(counter += 1) % REPLAY_KEYS}` } }) },
      },
    ];
    // A short warm-up of every route, so the first measured run does not pay for compilation.
    for (const { request } of routes) {
      await new Promise<void>((done, fail) => autocannon({ url: server.baseUrl, connections: 4, amount: 200, requests: [request] }, (error: Error | null) => (error ? fail(error) : done())));
    }
    for (const connections of CONNECTIONS) {
      log(`\n${connections} connections, ${SECONDS} s each`);
      for (const { route, request } of routes) {
        const result = await load(server.baseUrl, connections, request);
        const measured = {
          route,
          connections,
          perSecond: result.requests.average,
          p50Ms: result.latency.p50,
          p99Ms: result.latency.p99,
          non2xx: result.non2xx,
          errors: result.errors + result.timeouts,
        };
        runs.push(measured);
        log(`  ${route.padEnd(28)} ${measured.perSecond.toFixed(0).padStart(7)} req/s   p50 ${measured.p50Ms.toFixed(1).padStart(5)} ms   p99 ${measured.p99Ms.toFixed(1).padStart(6)} ms   non-2xx ${measured.non2xx}   errors ${measured.errors}`);
      }
    }
  } finally {
    await server.stop();
    await database.close();
  }
  const rate = (route: string, connections: number) => runs.find((run) => run.route === route && run.connections === connections)?.perSecond ?? NaN;
  const ratios = CONNECTIONS.flatMap((connections) =>
    (['new', 'replay'] as const).map((keys) => ({ connections, keys, ratio: rate(`payments, ${keys === 'new' ? 'new keys' : 'replays'}`, connections) / rate('no-op (POST /api/v1/ping)', connections) })),
  );
  log('');
  for (const { connections, keys, ratio } of ratios) log(`  payments (${keys === 'new' ? 'new keys' : 'replays'}) / no-op, ${connections} connections: ${ratio.toFixed(2)}x (reported; no target yet)`);
  return { runs, ratios };
}
