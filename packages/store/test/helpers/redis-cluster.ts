// A real Redis Cluster for a test file: six redis-servers (nine with two replicas a master; the
// binary helpers/redis finds) on free loopback ports, each with its own data directory, cluster
// bus port and nodes file, no persistence; `redis-cli --cluster create ... --cluster-replicas N`
// makes three masters with N replicas each. Ready once every node says cluster_state:ok and every
// replica's link is up. stop() ends every server (also when the start failed half-way) and
// removes the directories.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, openSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './free-port';
import { redisServerPath } from './redis';

const run = promisify(execFile);

const redisCliPath = redisServerPath && existsSync(join(dirname(redisServerPath), 'redis-cli')) ? join(dirname(redisServerPath), 'redis-cli') : 'redis-cli';

export interface ClusterNode {
  port: number;
  url: string;
  /** False once kill() ended it. */
  alive: boolean;
}

export interface TestRedisCluster {
  nodes: ClusterNode[];
  /** `redis: { cluster: { nodes } }`'s nodes: every node's URL. */
  rootNodes: { url: string }[];
  /** One command to one node (redis-cli), its output. */
  command(port: number, ...args: string[]): Promise<string>;
  /** The ports of the masters that serve slots now (CLUSTER NODES, asked of a live node). */
  masterPorts(): Promise<number[]>;
  /** The master serving `key`'s slot now. */
  masterOf(key: string): Promise<number>;
  /** Sends one node a signal without ending it (SIGSTOP: a stall, as of a paused VM or a swapped-out process, and `alive` false until SIGCONT resumes it). */
  signal(port: number, signal: 'SIGSTOP' | 'SIGCONT'): void;
  /** Ends one node with a signal (SIGKILL: a crash, nothing flushed). */
  kill(port: number, signal?: NodeJS.Signals): Promise<void>;
  /** Starts a killed node again with its nodes file: it rejoins (a replica of whoever took its slots). */
  restart(port: number): Promise<void>;
  /** Starts `redis-cli MONITOR` on every live node (and on each restarted one), each into `dir/<port>.<n>.log` (diagnosis only). */
  monitor(dir: string): void;
  /** Waits until every live node says cluster_state:ok and sees `masters` masters with slots. */
  waitUntilOk(options?: { timeoutMs?: number; masters?: number }): Promise<void>;
  stop(): Promise<void>;
}

async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | null>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown = null;
  for (;;) {
    try {
      const value = await probe();
      if (value !== null) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`${what} within ${timeoutMs} ms${last instanceof Error ? `: ${last.message}` : ''}`);
    await new Promise((done) => setTimeout(done, 100));
  }
}

/**
 * Starts a 3-master cluster with one replica each (`replicas`: that many each); `args` are further
 * settings for every node. `nodeTimeoutMs` (cluster-node-timeout): how long a master may be silent
 * before its replica takes over; the default (5 s) keeps a machine busy with other tests from
 * failing a master over.
 */
export async function startRedisCluster(args: string[] = [], { nodeTimeoutMs = 5_000, replicas = 1 }: { nodeTimeoutMs?: number; replicas?: number } = {}): Promise<TestRedisCluster> {
  if (!redisServerPath) throw new Error('redis-server is not installed (apt-get install redis-server redis-tools, or set REDIS_SERVER_PATH)');
  const binary = redisServerPath;
  const dir = await mkdtemp(join(tmpdir(), 'retrysafe-redis-cluster-'));
  const children = new Map<number, ChildProcess>();
  const nodes: ClusterNode[] = [];
  let output = '';
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-8000);
  };

  const launched = new Map<number, () => ChildProcess>();
  const launch = (port: number, busPort: number, nodeDir: string): ChildProcess => {
    const start = () => {
      const child = spawn(
          binary,
          [
            '--port', String(port),
            '--cluster-port', String(busPort),
            '--bind', '127.0.0.1',
            '--dir', nodeDir,
            '--cluster-enabled', 'yes',
            '--cluster-config-file', join(nodeDir, 'nodes.conf'),
            '--cluster-node-timeout', String(nodeTimeoutMs),
            // A replica may always be promoted, whatever its last contact with its master.
            '--cluster-replica-validity-factor', '0',
            '--save', '',
            '--appendonly', 'no',
            '--daemonize', 'no',
            ...args,
          ],
          { stdio: ['ignore', 'pipe', 'pipe'] },
        );
        child.stdout.on('data', keep);
        child.stderr.on('data', keep);
        return child;
      };
    launched.set(port, start);
    return start();
  };

  const command = async (port: number, ...commandArgs: string[]): Promise<string> => {
    const { stdout } = await run(redisCliPath, ['-h', '127.0.0.1', '-p', String(port), ...commandArgs], { timeout: 10_000 });
    return stdout;
  };
  const live = () => nodes.filter((node) => node.alive);
  const clusterNodes = async (): Promise<{ port: number; master: boolean; failed: boolean; slots: boolean; ranges: [number, number][] }[]> => {
    for (const node of live()) {
      const text = await command(node.port, 'CLUSTER', 'NODES').catch(() => '');
      if (!text) continue;
      return text
        .trim()
        .split('\n')
        .map((line) => {
          const fields = line.split(' ');
          const port = Number((fields[1] ?? '').split('@')[0]?.split(':')[1]);
          const flags = fields[2] ?? '';
          const ranges = fields.slice(8).filter((range) => !range.startsWith('[')).map((range): [number, number] => {
            const [low, high] = range.split('-').map(Number);
            return [low ?? 0, high ?? low ?? 0];
          });
          return { port, master: flags.includes('master'), failed: flags.includes('fail'), slots: ranges.length > 0, ranges };
        });
    }
    throw new Error('no live node answers CLUSTER NODES');
  };

  const halt = async (child: ChildProcess, signal: NodeJS.Signals): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill(signal);
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  };
  let monitorDir: string | null = null;
  const monitors: ChildProcess[] = [];
  let monitorCount = 0;
  const startMonitor = (port: number) => {
    if (!monitorDir) return;
    monitorCount += 1;
    const out = openSync(join(monitorDir, `${port}.${monitorCount}.log`), 'w');
    monitors.push(spawn(redisCliPath, ['-h', '127.0.0.1', '-p', String(port), 'MONITOR'], { stdio: ['ignore', out, out] }));
  };
  const stop = async (): Promise<void> => {
    for (const child of monitors) child.kill('SIGTERM');
    for (const child of children.values()) child.kill('SIGCONT');
    await Promise.all([...children.values()].map((child) => halt(child, 'SIGTERM')));
    await rm(dir, { recursive: true, force: true });
  };

  const cluster: TestRedisCluster = {
    nodes,
    rootNodes: [],
    command,
    async masterPorts() {
      return (await clusterNodes()).filter((node) => node.master && !node.failed && node.slots).map((node) => node.port);
    },
    async masterOf(key) {
      const slot = Number((await command(live()[0]?.port ?? 0, 'CLUSTER', 'KEYSLOT', key)).trim());
      const owner = (await clusterNodes()).find((node) => node.master && !node.failed && node.ranges.some(([low, high]) => slot >= low && slot <= high));
      if (!owner) throw new Error(`no live master serves slot ${slot}`);
      return owner.port;
    },
    signal(port, signal) {
      const child = children.get(port);
      const node = nodes.find((candidate) => candidate.port === port);
      if (!child || !node) throw new Error(`no node on ${port}`);
      child.kill(signal);
      // A stopped node accepts connections and answers nothing: the helper's own queries skip it.
      node.alive = signal === 'SIGCONT';
    },
    async kill(port, signal = 'SIGKILL') {
      const child = children.get(port);
      const node = nodes.find((candidate) => candidate.port === port);
      if (!child || !node) throw new Error(`no node on ${port}`);
      node.alive = false;
      await halt(child, signal);
    },
    async restart(port) {
      const start = launched.get(port);
      const node = nodes.find((candidate) => candidate.port === port);
      if (!start || !node) throw new Error(`no node on ${port}`);
      const child = children.get(port);
      if (child) await halt(child, 'SIGKILL');
      children.set(port, start());
      node.alive = true;
      await until(`redis-server on ${port} answering PING again`, 20_000, async () => ((await command(port, 'PING')).trim() === 'PONG' ? true : null));
      startMonitor(port);
    },
    monitor(dir) {
      monitorDir = dir;
      for (const node of live()) startMonitor(node.port);
    },
    async waitUntilOk({ timeoutMs = 60_000, masters = 3 } = {}) {
      await until(`cluster_state:ok on every live node with ${masters} masters`, timeoutMs, async () => {
        for (const node of live()) {
          if (!(await command(node.port, 'CLUSTER', 'INFO')).includes('cluster_state:ok')) return null;
        }
        return (await cluster.masterPorts()).length === masters ? true : null;
      });
      // Every replica of a live master has its link up (a promotion needs a synchronised replica).
      await until('every replica linked to its master', timeoutMs, async () => {
        for (const node of live()) {
          const info = await command(node.port, 'INFO', 'replication');
          if (info.includes('role:slave') && !info.includes('master_link_status:up')) {
            const view = await clusterNodes();
            const masterPort = Number(/master_port:(\d+)/.exec(info)?.[1]);
            // A replica whose master is dead waits in vain: that is the test's business.
            if (view.some((entry) => entry.port === masterPort && !entry.failed)) return null;
          }
        }
        return true;
      });
    },
    stop,
  };

  try {
    // Every port of this cluster differs from the others (a node's port and bus port alike), and a
    // node that finds its port taken after all (another test's server bound it between freePort
    // closing it and redis-server binding it) starts again on other ports.
    const taken = new Set<number>();
    const pick = async (): Promise<number> => {
      for (;;) {
        const port = await freePort();
        if (!taken.has(port)) {
          taken.add(port);
          return port;
        }
      }
    };
    for (let index = 0; index < 3 * (1 + replicas); index += 1) {
      for (let attempt = 1; ; attempt += 1) {
        const port = await pick();
        const busPort = await pick();
        const nodeDir = join(dir, String(port));
        await run('mkdir', ['-p', nodeDir]);
        const child = launch(port, busPort, nodeDir);
        let own = '';
        child.stdout?.on('data', (chunk: Buffer) => {
          own += chunk.toString();
        });
        children.set(port, child);
        const answered = await until(`redis-server on ${port} answering PING`, 20_000, async () => {
          if (child.exitCode !== null || child.signalCode !== null) {
            if (attempt < 5 && own.includes('Address already in use')) return false;
            throw new Error(`redis-server ${port} exited: ${output}`);
          }
          return (await command(port, 'PING')).trim() === 'PONG' ? true : null;
        });
        if (answered) {
          nodes.push({ port, url: `redis://127.0.0.1:${port}`, alive: true });
          break;
        }
        children.delete(port);
        launched.delete(port);
      }
    }
    cluster.rootNodes = nodes.map((node) => ({ url: node.url }));
    await run(redisCliPath, ['--cluster', 'create', ...nodes.map((node) => `127.0.0.1:${node.port}`), '--cluster-replicas', String(replicas), '--cluster-yes'], { timeout: 60_000 });
    await cluster.waitUntilOk({ timeoutMs: 60_000 });
    return cluster;
  } catch (error) {
    await stop();
    throw new Error(`the Redis Cluster did not start: ${error instanceof Error ? error.message : String(error)}\n${output}`, { cause: error });
  }
}
