// Starts the product the way a user does (`npm start`'s script: build if stale,
// migrate, serve) against a test database on a free port, and stops it afterwards.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { freePort } from '../../db/embedded';
import { dashboardUrlFor } from './database';

/** One set per test process, so several servers on one database agree on fingerprints, keys and sessions. */
export const testSecrets = {
  IDEMPOTENCY_SECRET: randomBytes(32).toString('base64url'),
  RESPONSE_ENCRYPTION_KEYS: `t1:${randomBytes(32).toString('base64')}`,
  AUTH_SECRET: randomBytes(32).toString('base64url'),
};

/** The first admin every test server bootstraps. */
export const testAdmin = { email: 'admin@test.example', password: randomBytes(12).toString('base64url') };

export interface RunningServer {
  baseUrl: string;
  output: () => string;
  stop(): Promise<void>;
}

export async function startServer(databaseUrl: string, extraEnv: Record<string, string> = {}): Promise<RunningServer> {
  const port = await freePort();
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'scripts/start.ts'], {
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      PORT: String(port),
      HOST: '127.0.0.1',
      IDEMPOTENCY_SECRET: testSecrets.IDEMPOTENCY_SECRET,
      RESPONSE_ENCRYPTION_KEYS: testSecrets.RESPONSE_ENCRYPTION_KEYS,
      AUTH_SECRET: testSecrets.AUTH_SECRET,
      DASHBOARD_DATABASE_URL: dashboardUrlFor(databaseUrl),
      PUBLIC_URL: `http://127.0.0.1:${port}`,
      ADMIN_EMAIL: testAdmin.email,
      ADMIN_PASSWORD: testAdmin.password,
      ...extraEnv,
    },
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
