import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { readJournal } from '../../db/migrate';
import { useTestDatabase } from '../helpers/database';

function cli(args: string[], env: Record<string, string>) {
  const result = spawnSync(process.execPath, ['--import', 'tsx', 'server/cli/main.ts', ...args], {
    env: { ...process.env, ...env },
    encoding: 'utf8',
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe('npm run cli', () => {
  const db = useTestDatabase();

  it('migrate prints one JSON object with what it applied', async () => {
    const result = cli(['migrate'], { DATABASE_URL: db.url });
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({ applied: [], current: (await readJournal()).at(-1)?.tag });
  });

  it('refuses an unknown command with a message on stderr and a non-zero exit', () => {
    const result = cli(['frobnicate'], { DATABASE_URL: db.url });
    expect(result.code).toBe(2);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain('unknown command: frobnicate');
  });

  it('refuses an invalid DATABASE_URL without echoing it', () => {
    const result = cli(['migrate'], { DATABASE_URL: 'mysql://user:hunter2@host/db' });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('DATABASE_URL');
    expect(result.stderr).not.toContain('hunter2');
  });
});
