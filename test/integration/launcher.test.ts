// Issue #29, point 4: `npm start` and `npm run cli` run built JavaScript (scripts/launch.mjs
// bundles the server's entry points into .build/<hash of the sources>/), rebuilt only when the
// sources change, and the CLI's stdout stays its JSON answer whatever the launcher says.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const launch = (...args: string[]) => spawnSync(process.execPath, ['scripts/launch.mjs', ...args], { encoding: 'utf8', timeout: 120_000 });

describe('the launcher (scripts/launch.mjs)', () => {
  it('builds the three entry points once into a folder named by the sources, then reuses it', () => {
    const first = launch('build');
    expect(first.status, first.stderr).toBe(0);
    const folder = /Server build: (\.build\/[0-9a-f]{16})/.exec(first.stderr)?.[1];
    expect(folder).toBeDefined();
    for (const entry of ['start.mjs', 'serve.mjs', 'cli.mjs']) expect(existsSync(`${folder}/${entry}`)).toBe(true);
    const second = launch('build');
    expect(second.status).toBe(0);
    expect(second.stderr).toContain(`Server build: ${folder}`);
    expect(second.stderr).not.toContain('Built the server');
  });

  it('runs the built CLI with its arguments, and its stdout is only the JSON answer', () => {
    const help = launch('cli', 'help');
    expect(help.status, help.stderr).toBe(0);
    const answer = JSON.parse(help.stdout) as { commands: string[] };
    expect(answer.commands).toContain('migrate');
  });

  it('refuses an unknown command with its usage', () => {
    const wrong = launch('serve');
    expect(wrong.status).toBe(2);
    expect(wrong.stderr).toContain('usage: node scripts/launch.mjs start | cli ARGS... | build');
  });
});
