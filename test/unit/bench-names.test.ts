// `npm run bench -- NAME` runs one bench; an unknown name is an error listing them (CONTRACT.md),
// exiting non-zero before any database starts (it ran nothing and exited 0 before).
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { BENCH_NAMES, chooseBenches } from '../../bench/names';

function runBench(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done, fail) => {
    const child = spawn('npm', ['run', '-s', 'bench', '--', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('error', fail);
    child.once('close', (code) => done({ code, stdout, stderr }));
  });
}

describe('choosing benches', () => {
  it('runs every bench but scale and cleanup (long: only when named) without a name, and only the named ones with names', () => {
    const all = chooseBenches([]);
    if (!all.ok) throw new Error(all.message);
    expect(BENCH_NAMES.filter((name) => !all.wanted(name))).toEqual(['scale', 'cleanup']);
    const scale = chooseBenches(['scale']);
    if (!scale.ok) throw new Error(scale.message);
    expect(BENCH_NAMES.filter((name) => scale.wanted(name))).toEqual(['scale']);
    const some = chooseBenches(['sweeper', 'http']);
    if (!some.ok) throw new Error(some.message);
    expect(BENCH_NAMES.filter((name) => some.wanted(name))).toEqual(['http', 'sweeper']);
  });

  it('refuses an unknown name, naming it and listing every bench', () => {
    const choice = chooseBenches(['lifecycle', 'UNKNOWN']);
    expect(choice.ok).toBe(false);
    if (choice.ok) return;
    expect(choice.message).toContain('"UNKNOWN"');
    expect(choice.message).not.toContain('"lifecycle"');
    for (const name of BENCH_NAMES) expect(choice.message).toContain(name);
  });

  it('npm run bench -- UNKNOWN exits non-zero with the list on stderr and starts no database', async () => {
    const { code, stdout, stderr } = await runBench(['UNKNOWN']);
    expect(code).not.toBe(0);
    expect(stderr).toContain('unknown bench "UNKNOWN"');
    for (const name of BENCH_NAMES) expect(stderr).toContain(name);
    // The first line of a run that opened its database names the server's version.
    expect(stdout).not.toContain('PostgreSQL');
  }, 60_000);
});
