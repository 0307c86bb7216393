// The example service (examples/orders-express) as an outside team runs it: the packed store and
// express (and mysql2 for BACKEND=mysql) installed into an empty project, server.mjs copied there
// and started with `node server.mjs` and only the environment it documents: no tsx, no source
// conditions, nothing of this repository.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../db/embedded';
import { installPackedStore, run } from '../../packages/store/test/helpers/packed-store';

export interface ExampleProject {
  dir: string;
  /** `npx --no-install retrysafe <args>` in the project: the installed package's CLI; its stdout parsed. */
  retrysafe(args: string[], env: Record<string, string>): Promise<unknown>;
  /** Starts `node server.mjs` with `env` (beside PATH, NODE_ENV, PORT and fresh secrets unless given) and waits for its first line. */
  start(env: Record<string, string>): Promise<RunningExample>;
  remove(): Promise<void>;
}

export interface RunningExample {
  ordersUrl: string;
  /** What it printed so far (stdout and stderr). */
  output(): string;
  /** SIGTERM (a graceful stop: flushes its flow counts), and waits for the exit. */
  stop(): Promise<void>;
  /** SIGKILL: the process dies where it is, and waits for the exit. */
  kill(): Promise<void>;
}

/** Installs the example's project; `packages` beside the tarball (express@5.3.0 always). */
export async function installExample(packages: string[] = []): Promise<ExampleProject> {
  const dir = await mkdtemp(join(tmpdir(), 'retrysafe-orders-'));
  const secrets = { IDEMPOTENCY_SECRET: randomBytes(32).toString('base64url'), RESPONSE_ENCRYPTION_KEYS: `o1:${randomBytes(32).toString('base64')}` };
  try {
    await installPackedStore(dir, 'orders', ['express@5.3.0', ...packages]);
    await copyFile(join(import.meta.dirname, '../../examples/orders-express/server.mjs'), join(dir, 'server.mjs'));
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
  const running = new Set<RunningExample>();
  return {
    dir,
    async retrysafe(args, env) {
      const { stdout } = await run('npx', ['--no-install', 'retrysafe', ...args], { cwd: dir, env: { ...process.env, ...env }, timeout: 120_000 });
      return JSON.parse(stdout) as unknown;
    },
    async start(env) {
      const example = await startExample(dir, { ...secrets, ...env });
      running.add(example);
      return example;
    },
    async remove() {
      await Promise.all([...running].map((example) => example.stop()));
      await rm(dir, { recursive: true, force: true });
    },
  };
}

async function startExample(dir: string, env: Record<string, string>): Promise<RunningExample> {
  const port = await freePort();
  const child: ChildProcess = spawn(process.execPath, ['server.mjs'], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? '', NODE_ENV: 'production', PORT: String(port), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const exited = new Promise<void>((done) => child.once('exit', () => done()));
  const end = async (signal: NodeJS.Signals) => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    await exited;
  };
  await new Promise<void>((ready, failed) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      failed(new Error(`the example did not start: ${output}`));
    }, 60_000);
    const seen = (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('orders service')) {
        clearTimeout(timer);
        ready();
      }
    };
    child.stdout?.on('data', seen);
    child.stderr?.on('data', seen);
    child.once('exit', (code: number | null) => {
      clearTimeout(timer);
      failed(new Error(`the example exited with ${code}: ${output}`));
    });
  });
  return { ordersUrl: `http://127.0.0.1:${port}/orders`, output: () => output, stop: () => end('SIGTERM'), kill: () => end('SIGKILL') };
}
