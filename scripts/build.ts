// Builds the Next app when the build is missing or older than its sources, so
// `npm start` on a fresh clone (or after a pull) serves what is checked out.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, readdir, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join, relative, resolve } from 'node:path';
import { withFileLock } from '../db/file-lock';
import { DATA_DIR } from '../db/database-url';

const ROOT = process.cwd();
const SOURCE_DIRS = ['app', 'components', 'server', 'db', 'packages/store/src'];
const SOURCE_FILES = ['next.config.js', 'tsconfig.json', 'tsconfig.app.json', 'package.json', 'package-lock.json', 'proxy.ts', 'instrumentation.ts', 'packages/store/package.json', 'packages/store/tsconfig.build.json'];
const STAMP = join(ROOT, '.next', 'retrysafe-source-hash');

async function listFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  const files: string[] = [];
  for (const entry of entries) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) files.push(...(await listFiles(path)));
    else if (entry.isFile()) files.push(path);
  }
  return files;
}

/** A digest of every file the build reads, by path and content. */
export async function sourceHash(): Promise<string> {
  const files = [
    ...(await Promise.all(SOURCE_DIRS.map((dir) => listFiles(join(ROOT, dir))))).flat(),
    ...SOURCE_FILES.map((file) => join(ROOT, file)).filter((file) => existsSync(file)),
  ].sort();
  const hash = createHash('sha256');
  for (const file of files) {
    hash.update(relative(ROOT, file)).update('\0').update(await readFile(file)).update('\0');
  }
  return hash.digest('hex');
}

async function isBuildCurrent(): Promise<boolean> {
  if (!existsSync(join(ROOT, '.next', 'BUILD_ID'))) return false;
  const stamp = await readFile(STAMP, 'utf8').catch(() => '');
  return stamp === (await sourceHash());
}

export type BuildOutcome = 'current' | 'built';

/** Builds unless current; concurrent callers wait for one build instead of racing on .next/. */
export async function buildIfStale(log: (line: string) => void): Promise<BuildOutcome> {
  return withFileLock(join(DATA_DIR, 'build'), async () => {
    if (await isBuildCurrent()) return 'current';
    log(existsSync(join(ROOT, '.next', 'BUILD_ID')) ? 'Sources changed since the last build: rebuilding' : 'Building the app (first run)');
    // The app imports @retrysafe/store as an adopter does: from its built dist/ (and npm start runs .build/).
    await buildStorePackage();
    await runNext(['build'], { stdio: 'inherit' });
    // Hash after the build: next build may rewrite tsconfig.json.
    await writeFile(STAMP, await sourceHash());
    return 'built';
  }, 15 * 60_000);
}

/**
 * What `npm run build` builds before Next (scripts/launch.mjs build): packages/store's dist/ when
 * its sources changed, and the server's bundled entry points (.build/) that `npm start` runs.
 */
export function buildStorePackage(): Promise<void> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, [join(ROOT, 'scripts', 'launch.mjs'), 'build'], { stdio: 'inherit' });
    child.once('error', fail);
    child.once('exit', (code, signal) => (code === 0 ? done() : fail(new Error(`building @retrysafe/store and the server failed (${signal ?? `exit code ${code}`})`))));
  });
}

export function nextBin(): string {
  return createRequire(resolve(ROOT, 'package.json')).resolve('next/dist/bin/next');
}

function runNext(args: string[], options: { stdio: 'inherit' }): Promise<void> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, [nextBin(), ...args], { stdio: options.stdio, env: { ...process.env, NEXT_TELEMETRY_DISABLED: '1' } });
    child.once('error', fail);
    child.once('exit', (code, signal) =>
      code === 0 ? done() : fail(new Error(`next ${args.join(' ')} failed (${signal ?? `exit code ${code}`})`)),
    );
  });
}
