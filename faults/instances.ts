// The server instances under test: `scripts/serve.ts` (the HTTP front `npm start` runs) on
// their own ports, against the suite's database, optionally under libfaketime.
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export interface InstanceOptions {
  name: string;
  port: number;
  env: Record<string, string>;
  logDir: string;
  /** A libfaketime offset such as '+1h' (needs the library's path in `faketimeLibrary`). */
  clockOffset?: string;
  faketimeLibrary?: string | null;
}

export class Instance {
  private child: ChildProcess | null = null;
  private exited: Promise<void> = Promise.resolve();
  offset: string | undefined;
  /** Settings of this instance on top of the shared ones, from its next start. */
  overrides: Record<string, string> = {};

  constructor(readonly options: InstanceOptions) {
    this.offset = options.clockOffset;
  }

  get name(): string {
    return this.options.name;
  }

  get baseUrl(): string {
    return `http://127.0.0.1:${this.options.port}`;
  }

  get running(): boolean {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  async start(timeoutMs = 120_000): Promise<void> {
    if (this.running) return;
    const env: NodeJS.ProcessEnv = { ...process.env, ...this.options.env, ...this.overrides, PORT: String(this.options.port), HOST: '127.0.0.1', PUBLIC_URL: this.baseUrl };
    if (this.offset && this.options.faketimeLibrary) {
      env.LD_PRELOAD = this.options.faketimeLibrary;
      env.FAKETIME = this.offset;
      // Keep the offset from the start (no re-reading of a config file on every call).
      env.FAKETIME_NO_CACHE = '0';
      env.DONT_FAKE_MONOTONIC = '1';
    }
    const out = createWriteStream(join(this.options.logDir, `${this.name}.log`), { flags: 'a' });
    const child = spawn(process.execPath, ['--conditions=retrysafe-source', '--import', 'tsx', 'scripts/serve.ts'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.pipe(out);
    child.stderr.pipe(out);
    this.child = child;
    this.exited = new Promise((done) => child.once('exit', () => done()));
    await this.waitHealthy(timeoutMs);
  }

  /** Waits until /api/health answers 200 (the database reachable, the schema current). */
  async waitHealthy(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (!this.running) throw new Error(`instance ${this.name} exited while starting (see its log in ${this.options.logDir})`);
      const status = await fetch(`${this.baseUrl}/api/health`, { signal: AbortSignal.timeout(5_000) }).then(
        (response) => response.status,
        () => 0,
      );
      if (status === 200) return;
      await sleep(250);
    }
    throw new Error(`instance ${this.name} was not healthy within ${timeoutMs / 1000} s`);
  }

  kill(signal: NodeJS.Signals): void {
    this.child?.kill(signal);
  }

  /** SIGTERM (a graceful stop: in-flight requests finish, metrics flushed), SIGKILL after 15 s. */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.kill('SIGTERM');
    const timer = setTimeout(() => this.kill('SIGKILL'), 15_000);
    await this.exited;
    clearTimeout(timer);
  }

  async killed(): Promise<void> {
    this.kill('SIGKILL');
    await this.exited;
  }
}
