// @retrysafe/store as an adopter gets it: `npm pack` into a folder, and an empty project there
// with the tarball and the packages the test names installed (from npm's cache where it can).
import { execFile } from 'node:child_process';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import lockfile from 'proper-lockfile';

export const run = promisify(execFile);
/** The package's folder (packages/store). */
export const STORE_ROOT = resolve(import.meta.dirname, '../..');

/** Packs the store into `dir`; returns the tarball's path. */
export async function packStore(dir: string): Promise<string> {
  // npm pack rebuilds dist/ (prepack): one pack at a time, so a run beside this one (CI runs two
  // suites at once) never packs a file the other's build is rewriting.
  const lockDir = join(STORE_ROOT, 'node_modules', '.cache');
  await mkdir(lockDir, { recursive: true });
  const release = await lockfile.lock(join(lockDir, 'pack'), {
    realpath: false,
    stale: 10_000,
    update: 2_000,
    retries: { retries: 1_200, factor: 1, minTimeout: 250, maxTimeout: 250 },
  });
  try {
    await run('npm', ['pack', '--pack-destination', dir, '--silent'], { cwd: STORE_ROOT });
  } finally {
    await release();
  }
  const packed = (await readdir(dir)).find((name) => name.endsWith('.tgz'));
  if (!packed) throw new Error('npm pack wrote no tarball');
  return join(dir, packed);
}

/** An ES-module project `name` in `dir` with the packed store and `packages` (e.g. 'express@5.3.0') installed; returns the tarball's path. */
export async function installPackedStore(dir: string, name: string, packages: string[]): Promise<string> {
  const tarball = await packStore(dir);
  await writeFile(join(dir, 'package.json'), JSON.stringify({ name, private: true, type: 'module' }));
  await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--silent', tarball, ...packages], { cwd: dir });
  return tarball;
}
