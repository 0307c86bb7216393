// Unauthenticated sign-in load against the payments API (issue #13, point 2): payment p50
// idle, then while 12 clients send bogus sign-ins without pause, in alternating rounds so the
// machine's other load falls on both alike. Each bogus sign-in is for an unknown email from
// its own address through a trusted proxy (TRUST_PROXY=loopback, X-Forwarded-For), so the
// per-account and per-address throttles never engage: only the hashing bound stands between
// the sign-ins and the CPU. A client told "busy" (429) waits the Retry-After it was given, as
// the answer asks; `ignoreRetryAfter` sends the next one at once (a flood of cheap 429s).
// Used by `npm run bench -- sign-in` (which reports the ratio against its 1.5x target) and by
// test/system/sign-in-load.test.ts (which asserts only behaviour: payments 201, sign-ins 401/429).
import { randomBytes, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { ensureDashboardLogin } from '../db/dashboard-access';
import { startServer } from './http';
import { createTenant } from '../server/demo/tenants';
import { openBenchDatabase } from './database';

export interface SignInLoadOptions {
  baseUrl: string;
  apiKey: string;
  clients?: number;
  paymentsPerRound?: number;
  rounds?: number;
  ignoreRetryAfter?: boolean;
  /** Flood the no-op route instead (POST /api/v1/ping): what any 12 clients without pause cost, for comparison. */
  noOpInstead?: boolean;
}

export interface SignInLoadReport {
  idleP50Ms: number;
  loadP50Ms: number;
  /** Payment p50 under load over idle: the target is at most 1.5. */
  ratio: number;
  /** Bogus sign-ins answered while loaded, by status (401 checked, 429 refused as busy). */
  signIns: Record<string, number>;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;

async function paymentP50(baseUrl: string, apiKey: string, count: number): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < count; i += 1) {
    const started = performance.now();
    const response = await fetch(`${baseUrl}/api/v1/payments`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'idempotency-key': `sign-in-load-${randomUUID()}`, 'content-type': 'application/json' },
      body: JSON.stringify({ amount: 1250, currency: 'EUR', description: 'Order 1234, two items' }),
    });
    await response.arrayBuffer();
    if (response.status !== 201) throw new Error(`payment answered ${response.status}`);
    times.push(performance.now() - started);
  }
  return median(times);
}

/** Bogus sign-ins from `clients` loops until `stop` is aborted; counts answers by status. */
async function bogusSignIns(baseUrl: string, clients: number, stop: AbortSignal, ignoreRetryAfter: boolean, noOp: boolean, answers: Record<string, number>): Promise<void> {
  let sent = 0;
  const client = async () => {
    while (!stop.aborted) {
      sent += 1;
      const response = await fetch(`${baseUrl}${noOp ? '/api/v1/ping' : '/api/auth/sign-in'}`, {
        method: 'POST',
        headers: { origin: baseUrl, 'content-type': 'application/json', 'x-forwarded-for': `10.${(sent >> 16) & 255}.${(sent >> 8) & 255}.${sent & 255}` },
        body: JSON.stringify({ email: `nobody-${randomUUID()}@load.example`, password: `guess ${sent}` }),
      }).catch(() => null);
      if (!response) continue;
      await response.arrayBuffer();
      answers[response.status] = (answers[response.status] ?? 0) + 1;
      const retryAfter = Number(response.headers.get('retry-after'));
      if (response.status === 429 && !ignoreRetryAfter && retryAfter > 0) await sleep(retryAfter * 1000).then(() => undefined);
    }
  };
  await Promise.all(Array.from({ length: clients }, client));
}

export async function measureSignInLoad(options: SignInLoadOptions): Promise<SignInLoadReport> {
  const { baseUrl, apiKey, clients = 12, paymentsPerRound = 40, rounds = 3, ignoreRetryAfter = false, noOpInstead = false } = options;
  // Warm-up: the first requests of each route pay for compilation.
  await paymentP50(baseUrl, apiKey, 10);
  const idle: number[] = [];
  const loaded: number[] = [];
  const signIns: Record<string, number> = {};
  for (let round = 0; round < rounds; round += 1) {
    idle.push(await paymentP50(baseUrl, apiKey, paymentsPerRound));
    const stop = new AbortController();
    const load = bogusSignIns(baseUrl, clients, stop.signal, ignoreRetryAfter, noOpInstead, signIns);
    await sleep(500);
    loaded.push(await paymentP50(baseUrl, apiKey, paymentsPerRound));
    stop.abort();
    await load;
  }
  const idleP50Ms = median(idle);
  const loadP50Ms = median(loaded);
  return { idleP50Ms, loadP50Ms, ratio: loadP50Ms / idleP50Ms, signIns };
}

/** `npm run bench -- sign-in`: the measurement above against `npm start`'s server on a fresh database. */
export async function benchSignIn(adminUrl: string, log: (line: string) => void): Promise<{ honouring: SignInLoadReport; ignoring: SignInLoadReport; noOp: SignInLoadReport }> {
  const database = await openBenchDatabase({ adminUrl });
  const admin = new pg.Client({ connectionString: database.url });
  await admin.connect();
  const dashboardUrl = await ensureDashboardLogin(admin, database.url, randomBytes(18).toString('base64url'));
  const tenant = await createTenant(admin, `bench ${randomUUID().slice(0, 8)}`);
  await admin.end();
  const server = await startServer(database.url, dashboardUrl, log, { TRUST_PROXY: 'loopback', LOG_LEVEL: 'error' });
  try {
    // The 1.5x target is the honouring clients' (what the test suite used to assert); the others are reported.
    const line = (label: string, report: SignInLoadReport, target = false) =>
      log(`  ${label.padEnd(44)} payment p50 idle ${report.idleP50Ms.toFixed(1).padStart(5)} ms, loaded ${report.loadP50Ms.toFixed(1).padStart(5)} ms: ${report.ratio.toFixed(2)}x ${target ? `(target <= 1.5x: ${report.ratio <= 1.5 ? 'met' : 'NOT met'})` : '(target <= 1.5x)'}; sign-ins ${JSON.stringify(report.signIns)}`);
    const honouring = await measureSignInLoad({ baseUrl: server.baseUrl, apiKey: tenant.apiKey, rounds: 5 });
    line('12 clients, waiting the Retry-After of a 429', honouring, true);
    const ignoring = await measureSignInLoad({ baseUrl: server.baseUrl, apiKey: tenant.apiKey, rounds: 5, ignoreRetryAfter: true });
    line('12 clients, ignoring Retry-After (reported)', ignoring);
    const noOp = await measureSignInLoad({ baseUrl: server.baseUrl, apiKey: tenant.apiKey, rounds: 5, noOpInstead: true });
    line('12 clients flooding the no-op route (reported)', noOp);
    return { honouring, ignoring, noOp };
  } finally {
    await server.stop();
    await database.close();
  }
}
