// A real MariaDB server of its own: Debian's mariadbd (apt-get install mariadb-server; or
// MARIADBD_PATH) with a data directory made by mariadb-install-db in a temporary folder, on a free
// loopback port and its own socket, never the machine's server on 3306. Clients connect over TCP
// as an ordinary user with a password and grants on one database, as a service would; root is
// used through the socket only to create them. No vitest here: the benchmarks start it too.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mysql, { type Pool } from 'mysql2/promise';
import { migrateMysql, MYSQL_POOL_SETTINGS } from '@retrysafe/store/mysql';
import { freePort } from './free-port';

function which(name: string): string | undefined {
  for (const dir of ['/usr/sbin', '/usr/bin', '/usr/local/sbin', '/usr/local/bin']) if (existsSync(join(dir, name))) return join(dir, name);
  try {
    return execFileSync('which', [name], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim() || undefined;
  } catch {
    return undefined;
  }
}

const serverPath = process.env.MARIADBD_PATH ?? which('mariadbd') ?? which('mysqld');
const installPath = which('mariadb-install-db') ?? which('mysql_install_db');
export const hasMariaDb = serverPath !== undefined && installPath !== undefined;

export interface MariaDb {
  /** mysql://retrysafe:<password>@127.0.0.1:<port>/service: an ordinary user with every privilege on that database only. */
  uri: string;
  port: number;
  /** The server's version string (e.g. 10.11.19-MariaDB-0+deb12u1). */
  version: string;
  /** Runs statements as root (through the server's socket): e.g. to make another user. */
  asRoot(statements: string[]): Promise<void>;
  /** A pool on `uri` as the backend opens its own (MYSQL_POOL_SETTINGS); closed by stop(). */
  pool(connectionLimit?: number): Pool;
  /** Stops the server (SIGTERM, then SIGKILL after 20 s) and removes its data directory. */
  stop(): Promise<void>;
}

async function answering(config: mysql.ConnectionOptions, child: ChildProcess, output: () => string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`mariadbd exited at start (${child.exitCode ?? child.signalCode}): ${output()}`);
    try {
      const connection = await mysql.createConnection({ ...config, connectTimeout: 1_000 });
      await connection.end();
      return;
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`mariadbd did not answer within ${timeoutMs} ms (${(error as Error).message}): ${output()}`);
      await new Promise((done) => setTimeout(done, 100));
    }
  }
}

/** Starts a MariaDB server with a fresh data directory; `migrated`: the backend's key table applied (migrateMysql). */
export async function startMariaDb(options: { migrated?: boolean } = {}): Promise<MariaDb> {
  if (!serverPath || !installPath) throw new Error('mariadb-server is not installed (apt-get install mariadb-server)');
  const dir = await mkdtemp(join(tmpdir(), 'retrysafe-mariadb-'));
  const datadir = join(dir, 'data');
  const socket = join(dir, 'sock');
  const asRoot = process.getuid?.() === 0 ? ['--user=root'] : [];
  // mariadb-install-db bootstraps a server of its own; on a loaded machine it has failed once
  // (CI, two test runs at once): up to three tries, each into an empty data directory, and the
  // last one's output in the error.
  for (let attempt = 1; ; attempt += 1) {
    try {
      execFileSync(installPath, ['--no-defaults', `--datadir=${datadir}`, '--auth-root-authentication-method=normal', '--skip-test-db', ...asRoot], { stdio: 'pipe' });
      break;
    } catch (error) {
      await rm(datadir, { recursive: true, force: true });
      if (attempt === 3) {
        const failed = error as Error & { stdout?: Buffer; stderr?: Buffer };
        throw new Error(`mariadb-install-db failed 3 times: ${failed.message}\n${failed.stderr?.toString() ?? ''}${failed.stdout?.toString().slice(-2_000) ?? ''}`);
      }
      await new Promise((done) => setTimeout(done, 1_000 * attempt));
    }
  }
  const port = await freePort();
  let output = '';
  const child = spawn(
    serverPath,
    [
      '--no-defaults',
      `--datadir=${datadir}`,
      `--port=${port}`,
      '--bind-address=127.0.0.1',
      `--socket=${socket}`,
      `--pid-file=${join(dir, 'pid')}`,
      '--skip-name-resolve',
      '--skip-log-bin',
      '--max-connections=400',
      '--innodb-buffer-pool-size=64M',
      // Tests need no durability across a power cut (as the Postgres tests run with fsync off).
      '--innodb-flush-log-at-trx-commit=2',
      ...asRoot,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-4000);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  const halt = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    await exited;
    clearTimeout(timer);
  };
  const pools: Pool[] = [];
  try {
    // root (no password) through the socket only, to make the service's user and database.
    await answering({ socketPath: socket, user: 'root' }, child, () => output, 30_000);
    const root = await mysql.createConnection({ socketPath: socket, user: 'root' });
    const password = randomBytes(12).toString('hex');
    await root.query('CREATE DATABASE service');
    await root.query(`CREATE USER 'retrysafe'@'127.0.0.1' IDENTIFIED BY '${password}'`);
    await root.query("GRANT ALL PRIVILEGES ON service.* TO 'retrysafe'@'127.0.0.1'");
    const [versionRows] = await root.query<mysql.RowDataPacket[]>('SELECT VERSION() AS version');
    await root.end();
    const uri = `mysql://retrysafe:${password}@127.0.0.1:${port}/service`;
    if (options.migrated) await migrateMysql(uri);
    return {
      uri,
      port,
      version: String(versionRows[0]?.version),
      async asRoot(statements) {
        const connection = await mysql.createConnection({ socketPath: socket, user: 'root' });
        try {
          for (const statement of statements) await connection.query(statement);
        } finally {
          await connection.end();
        }
      },
      pool(connectionLimit = 10) {
        const pool = mysql.createPool({ uri, connectionLimit, ...MYSQL_POOL_SETTINGS });
        pools.push(pool);
        return pool;
      },
      async stop() {
        await Promise.allSettled(pools.map((pool) => pool.end()));
        await halt();
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    await halt();
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
}
