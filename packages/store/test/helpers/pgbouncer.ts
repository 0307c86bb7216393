// A real PgBouncer in front of a test database: Debian's /usr/sbin/pgbouncer (or the one on
// PATH, or PGBOUNCER_PATH) with its own temporary config on a free loopback port, pool_mode =
// transaction by default and `ignore_startup_parameters = extra_float_digits` only (a common
// production configuration: any other startup parameter is refused). Where no binary is found,
// `hasPgBouncer` is false and the tests that need it are skipped, and say so.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { freePort } from './free-port';

function findPgBouncer(): string | undefined {
  if (process.env.PGBOUNCER_PATH) return existsSync(process.env.PGBOUNCER_PATH) ? process.env.PGBOUNCER_PATH : undefined;
  if (existsSync('/usr/sbin/pgbouncer')) return '/usr/sbin/pgbouncer';
  try {
    const found = execFileSync('which', ['pgbouncer'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    return found || undefined;
  } catch {
    return undefined;
  }
}

export const pgBouncerPath = findPgBouncer();
export const hasPgBouncer = pgBouncerPath !== undefined;

/** A binary's version as [major, minor] (e.g. [1, 18]). */
function versionOf(binary: string): readonly [number, number] | undefined {
  const printed = execFileSync(binary, ['--version'], { encoding: 'utf8' });
  const match = /PgBouncer (\d+)\.(\d+)/.exec(printed);
  return match ? [Number(match[1]), Number(match[2])] : undefined;
}

/** Whether a version tracks protocol-level prepared statements in transaction mode (1.21 and later). */
function tracksPrepared(version: readonly [number, number] | undefined): boolean {
  return version !== undefined && (version[0] > 1 || version[1] >= 21);
}

/** The default binary's version; undefined when there is none. */
export const pgBouncerVersion = pgBouncerPath ? versionOf(pgBouncerPath) : undefined;

/** Whether the default binary tracks prepared statements (1.21 and later). */
export const pgBouncerPrepares = tracksPrepared(pgBouncerVersion);

function ancestors(dir: string): string[] {
  const parent = dirname(dir);
  return parent === dir ? [dir] : [dir, ...ancestors(parent)];
}

/**
 * A PgBouncer that tracks prepared statements (1.21 and later), for the `transaction-prepared`
 * pooler mode: PGBOUNCER_PREPARED_PATH, else the default binary when it is recent enough, else
 * the one scripts/build-pgbouncer.sh builds from Debian's source package (Debian 12 ships 1.18).
 */
export const preparedPgBouncerPath = ((): string | undefined => {
  // The build's cache, in the node_modules of this folder or of any above it (the package's tests run from packages/store, the server's from the root).
  const built = ancestors(import.meta.dirname).map((dir) => join(dir, 'node_modules/.cache/pgbouncer/bin/pgbouncer'));
  const candidates = [process.env.PGBOUNCER_PREPARED_PATH, pgBouncerPrepares ? pgBouncerPath : undefined, ...built];
  return candidates.find((candidate): candidate is string => candidate !== undefined && candidate !== '' && existsSync(candidate) && tracksPrepared(versionOf(candidate)));
})();

if (hasPgBouncer && !preparedPgBouncerPath) {
  process.stdout.write('PgBouncer transaction-prepared tests SKIPPED: no PgBouncer 1.21 or later (scripts/build-pgbouncer.sh builds one, or set PGBOUNCER_PREPARED_PATH)\n');
}

if (!hasPgBouncer) {
  process.stdout.write('PgBouncer tests SKIPPED: no pgbouncer at /usr/sbin/pgbouncer or on PATH (apt-get install pgbouncer, or set PGBOUNCER_PATH)\n');
}

export interface PgBouncer {
  /** A URL through the pooler to `database` of the upstream (default: the upstream URL's own). */
  url(database?: string): string;
  /** Its admin console (the `pgbouncer` database), for SHOW/PAUSE/RESUME. */
  readonly adminUrl: string;
  /** The loopback port it listens on (kept across restarts). */
  readonly port: number;
  /** Its process id (a new one after a restart), e.g. to read its CPU time or pin it to a CPU. */
  readonly pid: number | undefined;
  /** PAUSE: resolves once every server connection is released; new queries wait. */
  pause(): Promise<void>;
  /** RESUME after pause(). */
  resume(): Promise<void>;
  /** Kills it at once (SIGTERM: every client and server connection dropped) and starts it again on the same port. */
  restart(): Promise<void>;
  /** Kills it (as restart does) and leaves it down: connections are refused until up(). */
  down(): Promise<void>;
  /** Starts it again after down(), on the same port. */
  up(): Promise<void>;
  /** Stops it and removes its config directory. */
  stop(): Promise<void>;
}

export interface PgBouncerOptions {
  /** The database server behind it (its host, port, user and password; the path is the default database). */
  upstreamUrl: string;
  mode?: 'transaction' | 'session';
  /** Server connections per (database, user): default_pool_size. Default 20. */
  poolSize?: number;
  /** Further roles clients may log in as (the upstream URL's user always can). */
  users?: { name: string; password?: string }[];
  /**
   * max_prepared_statements (PgBouncer 1.21 and later; refused by older ones): protocol-level
   * named statements tracked and prepared on each server connection as needed. Left out: the
   * version's default (0, none, before 1.24; 200 from 1.24).
   */
  maxPreparedStatements?: number;
  /** The binary (default: pgBouncerPath). */
  binary?: string;
}

function quoted(value: string): string {
  return `"${value.replace(/"/g, '""')}"`;
}

async function listening(port: number, timeoutMs: number, child: ChildProcess, output: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`pgbouncer exited at start (${child.exitCode ?? child.signalCode}): ${output()}`);
    const open = await new Promise<boolean>((resolve) => {
      const socket = connect({ host: '127.0.0.1', port }, () => {
        socket.end();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (open) return;
    if (Date.now() > deadline) throw new Error(`pgbouncer did not listen on 127.0.0.1:${port} within ${timeoutMs} ms: ${output()}`);
    await new Promise((done) => setTimeout(done, 50));
  }
}

/** Starts a PgBouncer in front of `upstreamUrl`'s server. Throws when no binary is installed (check `hasPgBouncer`). */
export async function startPgBouncer(options: PgBouncerOptions): Promise<PgBouncer> {
  const binary = options.binary ?? pgBouncerPath;
  if (!binary) throw new Error('pgbouncer is not installed (apt-get install pgbouncer, or set PGBOUNCER_PATH)');
  const upstream = new URL(options.upstreamUrl);
  const upstreamUser = decodeURIComponent(upstream.username) || userInfo().username;
  const upstreamPassword = decodeURIComponent(upstream.password);
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'retrysafe-pgbouncer-'));
  // PgBouncer refuses to run as root; as root it is told to drop to an unprivileged account,
  // which must read its config.
  const runAs = process.getuid?.() === 0 ? ['postgres', 'nobody'].find((name) => {
    try {
      execFileSync('id', [name], { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  }) : undefined;
  await chmod(dir, 0o755);
  const users = [{ name: upstreamUser, password: upstreamPassword }, ...(options.users ?? [])];
  const authFile = join(dir, 'users.txt');
  await writeFile(authFile, users.map((user) => `${quoted(user.name)} ${quoted(user.password ?? '')}`).join('\n') + '\n', { mode: 0o644 });
  const config = join(dir, 'pgbouncer.ini');
  await writeFile(config, [
    '[databases]',
    // Any database name is passed through to the upstream server of the same name.
    `* = host=${upstream.hostname.replace(/^\[|\]$/g, '')} port=${upstream.port || '5432'}`,
    '',
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    "unix_socket_dir =",
    // trust: a client's password is not checked (the upstream's is, with the auth file's).
    'auth_type = trust',
    `auth_file = ${authFile}`,
    `admin_users = ${upstreamUser}`,
    `pool_mode = ${options.mode ?? 'transaction'}`,
    `default_pool_size = ${options.poolSize ?? 20}`,
    'max_client_conn = 2000',
    'ignore_startup_parameters = extra_float_digits',
    ...(options.maxPreparedStatements === undefined ? [] : [`max_prepared_statements = ${options.maxPreparedStatements}`]),
    'server_login_retry = 1',
    'server_connect_timeout = 5',
    'log_connections = 0',
    'log_disconnections = 0',
    ...(runAs ? [`user = ${runAs}`] : []),
    '',
  ].join('\n'), { mode: 0o644 });

  let child: ChildProcess;
  let output = '';
  const launch = async (): Promise<void> => {
    output = '';
    child = spawn(binary, [config], { stdio: ['ignore', 'pipe', 'pipe'] });
    const keep = (chunk: Buffer) => {
      output = (output + chunk.toString()).slice(-4000);
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    await listening(port, 10_000, child, () => output);
  };
  const halt = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  };
  await launch();

  const url = (database?: string): string => {
    const through = new URL(options.upstreamUrl);
    through.hostname = '127.0.0.1';
    through.port = String(port);
    if (database !== undefined) through.pathname = `/${database}`;
    return through.toString();
  };
  const adminUrl = url('pgbouncer');
  const admin = async (command: string): Promise<void> => {
    const client = new pg.Client({ connectionString: adminUrl });
    await client.connect();
    try {
      await client.query(command); // no parameters: the console speaks the simple protocol only
    } finally {
      await client.end();
    }
  };
  return {
    url,
    adminUrl,
    port,
    get pid() {
      return child.pid;
    },
    pause: () => admin('PAUSE'),
    resume: () => admin('RESUME'),
    async restart() {
      await halt();
      await launch();
    },
    down: halt,
    async up() {
      if (child.exitCode === null && child.signalCode === null) return;
      await launch();
    },
    async stop() {
      await halt();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
