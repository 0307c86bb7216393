// @retrysafe/store as an adopter gets it: `npm pack` into a folder, and an empty project there
// with the tarball and the packages the test names installed (from npm's cache where it can).
import { execFile } from 'node:child_process';
import { readdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { DATA_DIR } from '../../db/database-url';
import { withFileLock } from '../../db/file-lock';

export const run = promisify(execFile);
export const ROOT = resolve(import.meta.dirname, '../..');

/** Packs the store into `dir`; returns the tarball's path. */
export async function packStore(dir: string): Promise<string> {
  // npm pack rebuilds dist/ (prepack): one pack at a time, so a run beside this one (CI runs two
  // suites at once) never packs a file the other's build is rewriting.
  await withFileLock(join(DATA_DIR, 'pack'), () => run('npm', ['pack', '-w', '@retrysafe/store', '--pack-destination', dir, '--silent'], { cwd: ROOT }));
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
