// `npm start`: database (embedded unless DATABASE_URL), migrations, build if stale,
// then the Next server. Prints progress as it goes and, last, where to open it.
// Ctrl-C (SIGINT) or SIGTERM stops the server, then the embedded database.
// The pre-flight (first admin, layout) runs on the composition root's owner pool
// (server/runtime.ts: `retrysafe-start`, two connections closed when idle a second); the runtime
// is handed the database, so its stop(), after the server's process has exited, leaves it last.
import { spawn, type ChildProcess } from 'node:child_process';
import { get as httpGet } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openDatabase } from '../db/database-url';
import { detectStoreLayout } from '../db/migrate';
import { prepareDatabase } from '../db/prepare';
import { DATA_DIR } from '../db/database-url';
import { loadOrCreateLocalSecrets } from '../db/local-secrets';
import { readEnvironment, requireDashboardSettings, requireStoreSecrets } from '../server/config';
import { checkKeyBackends } from '../server/key-backends';
import { ensureDashboardLogin } from '../db/dashboard-access';
import { ensureFirstAdmin, signInWords } from '../server/auth/bootstrap';
import { checkDashboardRole, checkReadReplica } from '../server/dashboard-pools';
import { createServerRuntime, type ServerRuntime } from '../server/runtime';
import { buildIfStale } from './build';
import { publicUrl, selfCheckTarget } from '../server/http-host';

const say = (line: string) => process.stdout.write(`[retrysafe] ${line}\n`);

/**
 * The HTTP front, as this script runs: built (`npm start` runs .build/<hash>/start.mjs, beside
 * which the launcher put serve.mjs) or from source through tsx (tests, development).
 */
function serveCommand(): string[] {
  const here = fileURLToPath(import.meta.url);
  if (here.endsWith('.mjs')) return ['--enable-source-maps', join(dirname(here), 'serve.mjs')];
  return ['--conditions=retrysafe-source', '--import', 'tsx', 'scripts/serve.ts'];
}

/** One GET of the health check with the given Host; the status, or 0 when nothing answered. */
function healthStatus(url: string, host: string): Promise<number> {
  return new Promise((done) => {
    const request = httpGet(url, { headers: { host }, timeout: 5_000 }, (response) => {
      response.resume();
      done(response.statusCode ?? 0);
    });
    request.on('timeout', () => request.destroy());
    request.on('error', () => done(0));
  });
}

async function waitUntilHealthy(target: { url: string; host: string }, server: ChildProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = 0;
  while (Date.now() < deadline) {
    if (server.exitCode !== null || server.signalCode !== null) throw new Error('the server exited during start-up');
    last = await healthStatus(target.url, target.host);
    if (last === 200) return;
    if (last === 421) {
      // Cannot happen with the host the allow-list is built from; said plainly should a proxy rewrite it.
      throw new Error(`${target.url} refused the host name ${target.host} (421): set PUBLIC_URL to the URL operators open the dashboard at`);
    }
    await sleep(250);
  }
  const answer = last === 0 ? 'no answer' : `last answer ${last}`;
  throw new Error(`${target.url} (Host: ${target.host}) did not answer 200 within ${timeoutMs / 1000} s (${answer}); the server's log above says why`);
}

/** The environment, or the process stops with the one line naming the setting at fault. */
function environmentOrExit(): ReturnType<typeof readEnvironment> {
  try {
    return readEnvironment();
  } catch (error) {
    say(`Start failed: ${error instanceof Error ? error.message : String(error)}`);
    process.exit(1);
  }
}

async function main(): Promise<void> {
  const environment = environmentOrExit();
  let runtime: ServerRuntime | undefined;
  let server: ChildProcess | undefined;
  let stopping = false;

  const stop = async (code: number) => {
    if (stopping) return;
    stopping = true;
    if (server && server.exitCode === null && server.signalCode === null) {
      say('Stopping the server');
      const exited = new Promise((done) => server?.once('exit', done));
      server.kill('SIGTERM');
      const timer = setTimeout(() => server?.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    }
    // The pre-flight's pool, then the database (server/runtime.ts logs what it could not close).
    await runtime?.stop();
    say('Stopped');
    process.exit(code);
  };
  process.on('SIGINT', () => void stop(0));
  process.on('SIGTERM', () => void stop(0));

  try {
    say(environment.DATABASE_URL ? 'Using the database at DATABASE_URL' : 'No DATABASE_URL: using embedded Postgres (data in .data/)');
    const database = await openDatabase(environment.DATABASE_URL, say);
    runtime = createServerRuntime({ environment, databaseUrl: database.url, database, owner: { applicationName: 'retrysafe-start', max: 2, idleTimeoutMillis: 1_000 } });
    const { ownerPool } = runtime;
    // Embedded mode generates its secrets once (kept in .data/); otherwise they are required.
    const secrets: Record<string, string> = {};
    const local = database.embedded ? await loadOrCreateLocalSecrets(DATA_DIR) : undefined;
    if (local) {
      secrets.IDEMPOTENCY_SECRET = process.env.IDEMPOTENCY_SECRET || local.idempotencySecret;
      secrets.RESPONSE_ENCRYPTION_KEYS = process.env.RESPONSE_ENCRYPTION_KEYS || local.responseEncryptionKeys;
      secrets.AUTH_SECRET = process.env.AUTH_SECRET || local.authSecret;
    } else {
      requireStoreSecrets(environment);
      requireDashboardSettings(environment);
    }
    // A database that cannot be reached, or a pooler other than DATABASE_POOLER says, stops here in one line.
    const prepared = await prepareDatabase(environment, database.url, say);
    if (prepared.migrated) {
      const { migrated } = prepared;
      say(
        migrated.applied.length > 0
          ? `Applied migrations: ${migrated.applied.join(', ')}`
          : `Schema is current (${migrated.current ?? 'no migrations'})`,
      );
      if (!migrated.dashboardGrants.applied) {
        say(`The dashboard role's grants could not be applied (${migrated.dashboardGrants.reason}): have a DBA run the SQL printed by \`npm run cli -- db grants\``);
      }
    } else {
      say(`Schema is current (${prepared.current ?? 'no migrations'}); not migrating: ${prepared.refused}`);
    }
    if (local && !environment.DASHBOARD_DATABASE_URL) {
      // The dashboard reads through its own restricted role (no response bodies, no store writes).
      const client = await ownerPool.connect();
      try {
        secrets.DASHBOARD_DATABASE_URL = await ensureDashboardLogin(client, database.url, local.dashboardPassword);
      } finally {
        client.release();
      }
    }
    // The dashboard's standby, refused now in one line (naming DASHBOARD_READ_URL) if it is not one.
    const dashboardUrl = secrets.DASHBOARD_DATABASE_URL ?? environment.DASHBOARD_DATABASE_URL;
    // The dashboard's role, refused now in one line naming the fix (GRANT, search_path), not a 500 at sign-in.
    if (dashboardUrl) await checkDashboardRole(dashboardUrl);
    // Services whose keys the dashboard reads in Redis or MySQL: reachable, and (MySQL) no privilege on response bodies.
    if (environment.DASHBOARD_KEYS_REDIS || environment.DASHBOARD_KEYS_MYSQL) {
      await checkKeyBackends({ redis: environment.DASHBOARD_KEYS_REDIS, mysql: environment.DASHBOARD_KEYS_MYSQL });
      say(`Key records read elsewhere: ${[...(environment.DASHBOARD_KEYS_REDIS?.keys() ?? [])].map((s) => `${s} (Redis)`).concat([...(environment.DASHBOARD_KEYS_MYSQL?.keys() ?? [])].map((s) => `${s} (MySQL)`)).join(', ')}`);
    }
    if (environment.DASHBOARD_READ_URL && dashboardUrl) {
      await checkReadReplica(environment.DASHBOARD_READ_URL, dashboardUrl);
      say('The dashboard reads from the standby at DASHBOARD_READ_URL (writes go to the primary)');
    }
    const admin = await ensureFirstAdmin(ownerPool, { email: environment.ADMIN_EMAIL, password: environment.ADMIN_PASSWORD });
    // The generated password is printed once, on the last line (where to sign in).
    if (admin.created) say(`Created the first admin: ${admin.email}${admin.generatedPassword ? ' with a generated password (on the last line, shown this once)' : ' (password from ADMIN_PASSWORD)'}`);
    const layout = await detectStoreLayout(ownerPool);
    say(`Key store layout: ${layout}`);
    if (layout !== environment.STORE_LAYOUT) {
      say(`Note: STORE_LAYOUT=${environment.STORE_LAYOUT} is chosen when a database is first migrated; this one is ${layout}`);
    }
    const build = await buildIfStale(say);
    if (build === 'current') say('Build is current');

    const command = serveCommand();
    say(`Starting the server on ${environment.HOST}:${environment.PORT} (node ${command.map((part) => relative(process.cwd(), part) || part).join(' ')})`);
    // Next's handler behind our own HTTP front, which settles the client's address (TRUST_PROXY).
    server = spawn(process.execPath, command, {
      stdio: 'inherit',
      env: {
        ...process.env,
        ...secrets,
        DATABASE_URL: database.url,
        PORT: String(environment.PORT),
        HOST: environment.HOST,
        // The demo traffic generator runs by default in embedded mode only.
        DEMO_TRAFFIC: process.env.DEMO_TRAFFIC || (database.embedded ? '1' : '0'),
        RETRYSAFE_EMBEDDED: database.embedded ? '1' : '0',
        NEXT_TELEMETRY_DISABLED: '1',
        NODE_ENV: 'production',
      },
    });
    server.once('exit', (code, signal) => {
      if (stopping) return;
      // A terminal Ctrl-C reaches the server directly too; that is a normal stop.
      const normal = code === 0 || signal === 'SIGINT' || signal === 'SIGTERM';
      if (!normal) say(`The server exited unexpectedly (${signal ?? `exit code ${code}`})`);
      void stop(normal ? 0 : 1);
    });
    await waitUntilHealthy(selfCheckTarget(environment), server, 60_000);
    say(`Ready: open ${publicUrl(environment).origin} in your browser and ${signInWords(admin)}`);
  } catch (error) {
    say(`Start failed: ${error instanceof Error ? error.message : String(error)}`);
    await stop(1);
  }
}

void main();
