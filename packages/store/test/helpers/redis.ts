// A real Redis for a test file: Debian's /usr/bin/redis-server (or REDIS_SERVER_PATH, or the one
// on PATH) on a free loopback port with a data directory of its own, no persistence (--save ''
// --appendonly no), stopped and removed after. Never the machine's own Redis on 6379. Where no
// binary is found, `hasRedis` is false and the tests that need it are skipped, and say so.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectRedis, type RedisConnection } from '@retrysafe/store/redis';
import { freePort } from './free-port';

function findRedisServer(): string | undefined {
  if (process.env.REDIS_SERVER_PATH) return existsSync(process.env.REDIS_SERVER_PATH) ? process.env.REDIS_SERVER_PATH : undefined;
  if (existsSync('/usr/bin/redis-server')) return '/usr/bin/redis-server';
  try {
    return execFileSync('which', ['redis-server'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim() || undefined;
  } catch {
    return undefined;
  }
}

export const redisServerPath = findRedisServer();
export const hasRedis = redisServerPath !== undefined;

if (!hasRedis) {
  process.stdout.write('Redis tests SKIPPED: no redis-server at /usr/bin/redis-server or on PATH (apt-get install redis-server, or set REDIS_SERVER_PATH)\n');
}

export interface TestRedis {
  url: string;
  port: number;
  /** A connection of its own (connectRedis: Buffers for bulk strings), closed by stop(). */
  connection: RedisConnection;
  /** One command on that connection. */
  command(...args: (string | Buffer)[]): Promise<unknown>;
  /** Stops the server (SIGTERM: every connection cut, nothing kept) and starts it again on the same port. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

async function listening(port: number, child: ChildProcess, output: () => string): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`redis-server exited at start (${child.exitCode ?? child.signalCode}): ${output()}`);
    const open = await new Promise<boolean>((resolve) => {
      const socket = connect({ host: '127.0.0.1', port }, () => {
        socket.end();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (open) return;
    if (Date.now() > deadline) throw new Error(`redis-server did not listen on 127.0.0.1:${port} within 10 s: ${output()}`);
    await new Promise((done) => setTimeout(done, 50));
  }
}

/**
 * Starts a redis-server; `args` are further settings, e.g. ['--maxmemory', '2mb', '--maxmemory-policy', 'allkeys-lru'].
 * A port another test's server bound between freePort closing it and redis-server binding it: again on another.
 */
export async function startRedis(args: string[] = []): Promise<TestRedis> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await startRedisOn(await freePort(), args);
    } catch (error) {
      if (attempt >= 5 || !(error instanceof Error) || !error.message.includes('Address already in use')) throw error;
    }
  }
}

async function startRedisOn(port: number, args: string[]): Promise<TestRedis> {
  if (!redisServerPath) throw new Error('redis-server is not installed (apt-get install redis-server, or set REDIS_SERVER_PATH)');
  const dir = await mkdtemp(join(tmpdir(), 'retrysafe-redis-'));
  const binary = redisServerPath;
  let output = '';
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-4000);
  };
  const launch = (): ChildProcess => {
    const started = spawn(binary, ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', '--daemonize', 'no', ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    started.stdout.on('data', keep);
    started.stderr.on('data', keep);
    return started;
  };
  let child = launch();
  const halt = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  };
  try {
    await listening(port, child, () => output);
    const url = `redis://127.0.0.1:${port}`;
    const connection = await connectRedis(url);
    return {
      url,
      port,
      connection,
      command: (...command) => connection.commands.sendCommand(command),
      async restart() {
        await halt();
        child = launch();
        await listening(port, child, () => output);
      },
      async stop() {
        await connection.close().catch(() => undefined);
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
