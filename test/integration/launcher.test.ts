// Issue #29, point 4: `npm start` and `npm run cli` run built JavaScript (scripts/launch.mjs
// bundles the server's entry points into .build/<hash of the sources>/), rebuilt only when the
// sources change, and the CLI's stdout stays its JSON answer whatever the launcher says.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join } from 'node:path';
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

  it('imports only packages a production install keeps (npm prune --omit=dev), through @retrysafe/store too', () => {
    const built = launch('build');
    const folder = /Server build: (\.build\/[0-9a-f]{16})/.exec(built.stderr)?.[1] ?? '';
    const bare = (file: string) =>
      [...readFileSync(file, 'utf8').matchAll(/(?:from|import)\s*\(?\s*["']([^"']+)["']/g)].map((match) => match[1] ?? '').filter((specifier) => /^[@\w./-]+$/.test(specifier) && !specifier.startsWith('node:') && !builtinModules.includes(specifier.split('/')[0] ?? ''));
    const packageOf = (specifier: string) => (specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : (specifier.split('/')[0] ?? ''));
    const imported = new Set<string>();
    const store = JSON.parse(readFileSync('packages/store/package.json', 'utf8')) as { exports: Record<string, string | { default: string }> };
    const exported = (subpath: string) => {
      const target = store.exports[subpath];
      return typeof target === 'string' ? target : (target?.default ?? 'missing');
    };
    const seen = new Set<string>();
    // The store's files the server reaches (its dist/, as a production install runs it), and what they import.
    const walk = (file: string) => {
      if (seen.has(file) || file.endsWith('.json')) return;
      seen.add(file);
      for (const specifier of bare(file)) {
        if (specifier.startsWith('.')) walk(join(dirname(file), specifier));
        else if (specifier.startsWith('@retrysafe/store')) walk(join('packages/store', exported(`.${specifier.slice('@retrysafe/store'.length)}`)));
        else imported.add(packageOf(specifier));
      }
    };
    for (const file of readdirSync(folder).filter((name) => name.endsWith('.mjs'))) walk(join(folder, file));
    expect(imported).toContain('next');
    expect(imported).toContain('pg');
    const lock = JSON.parse(readFileSync('package-lock.json', 'utf8')) as { packages: Record<string, { dev?: boolean; devOptional?: boolean }> };
    const devOnly = [...imported].filter((name) => {
      const entry = lock.packages[`node_modules/${name}`];
      return entry === undefined || entry.dev === true || entry.devOptional === true;
    });
    expect(devOnly).toEqual([]);
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
