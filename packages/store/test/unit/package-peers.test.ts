// Every framework an adapter of @retrysafe/store imports is an optional peer dependency: an
// adopter installs only the framework they use, and npm checks its version against ours.
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';

const packageDir = join(import.meta.dirname, '../..');
const manifestSchema = z.object({
  dependencies: z.record(z.string(), z.string()),
  devDependencies: z.record(z.string(), z.string()),
  exports: z.record(z.string(), z.unknown()),
  peerDependencies: z.record(z.string(), z.string()),
  peerDependenciesMeta: z.record(z.string(), z.object({ optional: z.boolean() })),
});

async function adapterImports(): Promise<string[]> {
  const dir = join(packageDir, 'src/adapters');
  const names = new Set<string>();
  for (const file of (await readdir(dir)).filter((name) => name.endsWith('.ts'))) {
    const source = await readFile(join(dir, file), 'utf8');
    for (const [, specifier] of source.matchAll(/from '([^'.][^']*)'/g)) {
      if (specifier && !specifier.startsWith('node:')) names.add(specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0] ?? specifier);
    }
  }
  return [...names].sort();
}

describe('@retrysafe/store peer dependencies', () => {
  it('lists every framework an adapter imports as an optional peer', async () => {
    const manifest = manifestSchema.parse(JSON.parse(await readFile(join(packageDir, 'package.json'), 'utf8')));
    const frameworks = (await adapterImports()).filter((name) => !(name in manifest.dependencies));
    expect(frameworks).toEqual(expect.arrayContaining(['express', 'fastify', 'hono']));
    for (const name of frameworks) {
      expect(manifest.peerDependencies, name).toHaveProperty(name);
      expect(manifest.peerDependenciesMeta[name], name).toEqual({ optional: true });
    }
  });

  it('lists mysql2 as an optional peer, imported (at run time) only by the MySQL backend\'s modules', async () => {
    const manifest = manifestSchema.parse(JSON.parse(await readFile(join(packageDir, 'package.json'), 'utf8')));
    expect(manifest.peerDependencies).toHaveProperty('mysql2');
    expect(manifest.peerDependenciesMeta.mysql2).toEqual({ optional: true });
    const importers: string[] = [];
    for (const file of (await readdir(join(packageDir, 'src'), { recursive: true })).filter((name) => name.endsWith('.ts'))) {
      const source = await readFile(join(packageDir, 'src', file), 'utf8');
      // A value import; `import type` is erased and loads nothing.
      if (/^import (?!type )[^;]*from 'mysql2/m.test(source)) importers.push(file);
    }
    expect(importers.sort()).toEqual(['mysql-migrate.ts', 'mysql.ts']);
    // Everything else reaches them through a dynamic import (createRetrysafe's mysql option, the CLI's --mysql).
    for (const file of ['index.ts', 'retrysafe.ts', 'cli.ts', 'store.ts']) {
      const source = await readFile(join(packageDir, 'src', file), 'utf8');
      expect(source, file).not.toMatch(/^import (?!type )[^;]*from '\.\/mysql(-migrate|-retention)?\.js'/m);
    }
  });

  it('lists drizzle-orm as an optional peer, imported only by the Drizzle tables (`@retrysafe/store/drizzle`), which nothing else imports', async () => {
    const manifest = manifestSchema.parse(JSON.parse(await readFile(join(packageDir, 'package.json'), 'utf8')));
    expect(manifest.peerDependencies).toHaveProperty('drizzle-orm');
    expect(manifest.peerDependenciesMeta['drizzle-orm']).toEqual({ optional: true });
    expect(manifest.dependencies).not.toHaveProperty('drizzle-orm');
    expect(manifest.exports).toHaveProperty('./drizzle');
    // Built and tested against the version the Retrysafe server runs.
    const root = manifestSchema.pick({ dependencies: true }).parse(JSON.parse(await readFile(join(packageDir, '../../package.json'), 'utf8')));
    expect(manifest.devDependencies['drizzle-orm']).toBe(root.dependencies['drizzle-orm']);
    const importers: string[] = [];
    const reachers: string[] = [];
    for (const file of (await readdir(join(packageDir, 'src'), { recursive: true })).filter((name) => name.endsWith('.ts'))) {
      const source = await readFile(join(packageDir, 'src', file), 'utf8');
      // Any import, `import type` included: the rest of the package's declarations must not need drizzle-orm either.
      if (/^import [^;]*from 'drizzle-orm/m.test(source)) importers.push(file);
      if (!file.startsWith('drizzle/') && /from '\.\.?\/(?:\.\.\/)*drizzle\//m.test(source)) reachers.push(file);
    }
    expect(importers.length).toBeGreaterThan(0);
    expect(importers.filter((file) => !file.startsWith('drizzle/'))).toEqual([]);
    expect(reachers).toEqual([]);
  });
});
