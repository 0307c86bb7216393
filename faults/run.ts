// `npm run faults`: injects each fault into real processes (a PostgreSQL of the suite's own,
// two server instances, 64 retrying callers), judges effects, answers, recovery and metrics
// after each, prints a table and exits non-zero on any duplicate, lost outcome, 500 or hang.
// FAULTS=1,2 runs only those faults (by number).
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { SERVER_SEARCH_PATH_OPTIONS } from '../db/client';
import { migrateDatabase } from '../db/migrate';
import { ensurePolicies } from '../server/retention/policies';
import { defaultPolicyFields, REFUNDS_ENDPOINT } from '../server/demo/policies';
import { createTenant } from '../server/demo/tenants';
import { buildIfStale } from '../scripts/build';
import { freePort } from '../db/embedded';
import { startCluster, type Cluster } from './cluster';
import { Instance } from './instances';
import { emptyResult, type FaultResult } from './checks';
import { printTable } from './table';
import { faults } from './faults';
import type { Harness } from './harness';

const say = (line: string) => process.stdout.write(`[faults] ${line}\n`);

/** The refunds' lease in this run: short, so a killed instance's claims are taken over within the fault. */
export const REFUND_LEASE_MS = 4_000;
export const FLUSH_SECONDS = 2;

async function main(): Promise<number> {
  const started = Date.now();
  const wanted = (process.env.FAULTS ?? '').split(',').filter(Boolean).map(Number);
  const dir = await mkdtemp(join(tmpdir(), 'retrysafe-faults-'));
  // The instances' logs outlive the run (git-ignored), for a look after a failure.
  const logDir = join(process.cwd(), '.data', 'faults');
  await rm(logDir, { recursive: true, force: true });
  await mkdir(logDir, { recursive: true });
  let cluster: Cluster | undefined;
  const instances: Instance[] = [];
  let db: pg.Pool | undefined;
  const results: FaultResult[] = [];
  const stopAll = async () => {
    await Promise.allSettled(instances.map((instance) => instance.stop()));
    await db?.end().catch(() => undefined);
    await cluster?.teardown().catch((error: unknown) => say(`teardown: ${String(error)}`));
  };
  process.once('SIGINT', () => void stopAll().finally(() => process.exit(130)));
  try {
    const build = await buildIfStale(say);
    say(build === 'built' ? 'built the app' : 'the build is current');
    cluster = await startCluster(dir, say);
    say(`PostgreSQL at ${cluster.host}:${cluster.port}, data on ${cluster.caps.tmpfs ? 'a tmpfs of its own' : 'the temp folder'}${cluster.caps.namespace ? `, in network namespace ${cluster.caps.namespace}` : ''}`);
    say(`netem: ${cluster.caps.netem ? 'available' : 'not in this kernel (delay by a tbf rate limit, loss by iptables)'}; iptables: ${cluster.caps.iptables ? 'yes' : 'no'}; libfaketime: ${cluster.caps.faketime ?? 'no'}`);
    const migrated = await migrateDatabase(cluster.url);
    say(`migrated (${migrated.applied.length} migrations)`);
    db = new pg.Pool({ connectionString: cluster.url, options: SERVER_SEARCH_PATH_OPTIONS, max: 4, connectionTimeoutMillis: 5_000, query_timeout: 30_000 });
    db.on('error', () => undefined);
    const tenants = await Promise.all([0, 1, 2, 3].map((n) => createTenant(db as pg.Pool, `faults-${n}`)));
    // The refunds' lease is short in this run, so takeovers happen within a fault.
    const refunds = defaultPolicyFields[REFUNDS_ENDPOINT];
    if (!refunds) throw new Error('no default refunds policy');
    await ensurePolicies(db, 'demo', { ...defaultPolicyFields, [REFUNDS_ENDPOINT]: { ...refunds, leaseMs: REFUND_LEASE_MS } }, 'faults-suite');
    const env: Record<string, string> = {
      DATABASE_URL: cluster.url,
      DASHBOARD_DATABASE_URL: cluster.url,
      IDEMPOTENCY_SECRET: randomBytes(32).toString('base64url'),
      RESPONSE_ENCRYPTION_KEYS: `f1:${randomBytes(32).toString('base64')}`,
      AUTH_SECRET: randomBytes(32).toString('base64url'),
      DEMO_TRAFFIC: '0',
      DEMO_PROCESSOR_FAILURE_RATE: '0',
      DEMO_PROCESSOR_LATENCY_MS: '40',
      METRICS_FLUSH_SECONDS: String(FLUSH_SECONDS),
      SWEEP_INTERVAL_SECONDS: '3600',
      NODE_ENV: 'production',
      NEXT_TELEMETRY_DISABLED: '1',
      LOG_LEVEL: 'warn',
    };
    for (const name of ['a', 'b']) {
      instances.push(new Instance({ name, port: await freePort(), env, logDir, faketimeLibrary: cluster.caps.faketime }));
    }
    await Promise.all(instances.map((instance) => instance.start()));
    say(`instance logs in ${logDir}`);
    say(`instances a and b serving on ${instances.map((instance) => instance.baseUrl).join(', ')}`);
    const harness: Harness = { cluster, db, instances, tenants, env, dir, say };
    for (const fault of faults) {
      if (wanted.length > 0 && !wanted.includes(fault.number)) continue;
      say(`fault ${fault.number}: ${fault.name}`);
      const skip = fault.skip?.(harness);
      if (skip) {
        results.push({ ...emptyResult(`${fault.number}. ${fault.name}`), skipped: skip });
        say(`  skipped: ${skip}`);
        continue;
      }
      const faultStarted = Date.now();
      try {
        const result = await fault.run(harness);
        results.push(result);
        say(`  done in ${((Date.now() - faultStarted) / 1000).toFixed(0)} s: ${result.failures.length === 0 ? 'ok' : result.failures.join('; ')}`);
      } catch (error) {
        const failed = emptyResult(`${fault.number}. ${fault.name}`);
        failed.failures.push(`the fault could not run: ${error instanceof Error ? error.message : String(error)}`);
        results.push(failed);
        say(`  could not run: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
        say(await cluster.logTail(10));
      }
      // Whatever a fault did, the next one starts with the database and both instances up.
      await fault.restore?.(harness).catch((error: unknown) => say(`  restoring after the fault failed: ${String(error)}`));
      await Promise.all(instances.map((instance) => instance.start()));
    }
  } finally {
    await stopAll();
  }
  printTable(results, (line) => process.stdout.write(`${line}\n`));
  const failed = results.filter((result) => result.failures.length > 0);
  say(`finished in ${((Date.now() - started) / 1000).toFixed(0)} s; ${results.filter((r) => r.skipped).length} skipped; ${failed.length} failed`);
  for (const result of failed) say(`${result.fault}: ${result.failures.join('; ')}`);
  return failed.length > 0 ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    say(`the suite could not run: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(2);
  },
);
