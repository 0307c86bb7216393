// `npm start`'s script run as a child process on a free loopback port with the given
// environment, resolved once it prints its Ready line; for the tests and the HTTP bench, which
// use the product the way a user starts it.
import { spawn, type ChildProcess } from 'node:child_process';
import { freePort } from '../db/embedded';

export interface RunningServer {
  baseUrl: string;
  port: number;
  output: () => string;
  stop(): Promise<void>;
}

/** Starts `npm start`'s launcher (scripts/launch.mjs start) with `env` over the process environment (PORT, HOST and PUBLIC_URL set to the free loopback port). */
export async function spawnStart(env: Record<string, string>): Promise<RunningServer> {
  const port = await freePort();
  // As `npm start` runs it: the launcher, which runs the built server (.build/), building it if stale.
  const child: ChildProcess = spawn(process.execPath, ['scripts/launch.mjs', 'start'], {
    env: { ...process.env, PORT: String(port), HOST: '127.0.0.1', PUBLIC_URL: `http://127.0.0.1:${port}`, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  await new Promise<void>((ready, fail) => {
    const timer = setInterval(() => {
      if (output.includes('[retrysafe] Ready:')) {
        clearInterval(timer);
        ready();
      }
    }, 100);
    child.once('exit', (code) => {
      clearInterval(timer);
      fail(new Error(`server exited during start-up (code ${code}):\n${output}`));
    });
  });
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    port,
    output: () => output,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((done) => child.once('exit', done));
      child.kill('SIGTERM');
      await exited;
    },
  };
}
