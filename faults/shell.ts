// Running the machine's tools (ip, tc, iptables, pg_ctl, mount) from the fault suite: each
// call resolves with its exit status and output, never throws unless asked to.
import { spawn } from 'node:child_process';

export interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

export function run(command: string, args: readonly string[], options: { timeoutMs?: number; env?: NodeJS.ProcessEnv } = {}): Promise<Ran> {
  return new Promise((done) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], env: options.env ?? process.env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 120_000);
    child.once('error', (error) => {
      clearTimeout(timer);
      done({ code: -1, stdout, stderr: stderr + error.message });
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      done({ code: code ?? -1, stdout, stderr });
    });
  });
}

/** Runs and throws with the command's stderr when it fails. */
export async function must(command: string, args: readonly string[], options: { timeoutMs?: number } = {}): Promise<string> {
  const result = await run(command, args, options);
  if (result.code !== 0) throw new Error(`${command} ${args.join(' ')} failed (${result.code}): ${result.stderr.trim() || result.stdout.trim()}`);
  return result.stdout;
}
