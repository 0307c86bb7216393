// Starts the product the way a user does (`npm start`'s script: build if stale,
// migrate, serve) against a test database on a free port, and stops it afterwards.
import { spawn, type ChildProcess } from 'node:child_process';
import { freePort } from '../../db/embedded';

export interface RunningServer {
  baseUrl: string;
  output: () => string;
  stop(): Promise<void>;
}

export async function startServer(databaseUrl: string, extraEnv: Record<string, string> = {}): Promise<RunningServer> {
  const port = await freePort();
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'scripts/start.ts'], {
    env: { ...process.env, DATABASE_URL: databaseUrl, PORT: String(port), HOST: '127.0.0.1', ...extraEnv },
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
    output: () => output,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((done) => child.once('exit', done));
      child.kill('SIGTERM');
      await exited;
    },
  };
}
