// `npm start`, `npm run cli` and the server half of `npm run build`: production runs built
// JavaScript, not TypeScript through a loader. Plain Node, so it runs before anything is built.
//
//   node scripts/launch.mjs start        build what is stale, then run .build/<hash>/start.mjs
//   node scripts/launch.mjs cli ARGS...  the same for the CLI (.build/<hash>/cli.mjs)
//   node scripts/launch.mjs build        build what is stale and print where it is
//   node scripts/launch.mjs build --app  the same, then the Next app if stale (`npm run build`)
//
// Two things are built, each only when its sources changed:
// - @retrysafe/store's dist/ (tsc), which the built server imports as an adopter does;
// - the server's own entry points (scripts/start.ts, scripts/serve.ts, server/cli/main.ts and
//   everything of ours they import), bundled by esbuild into .build/<hash of the sources>/
//   with every package left external. The folder's name is the hash, written under a temporary
//   name and renamed into place, so concurrent starts never read a half-written build.
// esbuild and typescript are development dependencies: an install without them (npm ci
// --omit=dev) runs what `npm run build` built and refuses, saying so, if the sources changed.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';

const ROOT = process.cwd();
const BUILD_DIR = join(ROOT, '.build');
const STORE = join(ROOT, 'packages', 'store');
const STORE_STAMP = join(STORE, 'dist', '.source-hash');
/** Everything the bundled entry points can import of ours, and what decides how it compiles. */
const SERVER_SOURCES = ['server', 'db', 'scripts', 'app/_lib', 'tsconfig.json', 'package.json', 'package-lock.json'];
const STORE_SOURCES = ['packages/store/src', 'packages/store/tsconfig.build.json', 'packages/store/package.json'];
const ENTRY_POINTS = { start: 'scripts/start.ts', serve: 'scripts/serve.ts', cli: 'server/cli/main.ts', 'build-app': 'scripts/build-app.ts' };
const CODE = /\.(ts|tsx|mts|mjs|js|json)$/;
const KEEP_BUILDS = 3;

// On stderr: the CLI's stdout carries only its JSON answer.
const say = (line) => process.stderr.write(`[retrysafe] ${line}\n`);

function listFiles(path) {
  const full = join(ROOT, path);
  if (!existsSync(full)) return [];
  if (!statSync(full).isDirectory()) return [path];
  return readdirSync(full, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? listFiles(join(path, entry.name)) : entry.isFile() && CODE.test(entry.name) ? [join(path, entry.name)] : [],
  );
}

/** A digest of the files under `paths`, by path and content. */
function hashOf(paths) {
  const hash = createHash('sha256');
  for (const file of paths.flatMap(listFiles).sort()) hash.update(file).update('\0').update(readFileSync(join(ROOT, file))).update('\0');
  return hash.digest('hex').slice(0, 16);
}

/** Resolves a development dependency, or undefined where the install left them out. */
async function optional(name) {
  try {
    return await import(name);
  } catch {
    return undefined;
  }
}

function refuse(what) {
  say(`${what} is missing or older than its sources, and the tools to build it are not installed (a production install without dev dependencies): run \`npm run build\` where they are, or \`npm install\` here`);
  process.exit(1);
}

const storeIsCurrent = (hash) => existsSync(STORE_STAMP) && readFileSync(STORE_STAMP, 'utf8') === hash && existsSync(join(STORE, 'dist', 'index.js'));

/**
 * One builder at a time: the lock is a folder (mkdir is atomic); a lock older than ten minutes
 * is a builder that died, and is taken over.
 */
async function withStoreBuildLock(run) {
  const lock = join(STORE, '.build-lock');
  for (;;) {
    try {
      mkdirSync(lock);
      break;
    } catch (error) {
      if (error.code !== 'EEXIST') throw error;
      if (Date.now() - statSync(lock, { throwIfNoEntry: false })?.mtimeMs > 600_000) rmSync(lock, { recursive: true, force: true });
      else await new Promise((done) => setTimeout(done, 250));
    }
  }
  try {
    return await run();
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

/** @retrysafe/store's dist/, rebuilt by tsc when its sources changed (a pull, an edit). */
async function ensureStoreBuilt() {
  const hash = hashOf(STORE_SOURCES);
  if (storeIsCurrent(hash)) return;
  await withStoreBuildLock(() => buildStore(hash));
}

async function buildStore(hash) {
  // Another start may have built it while this one waited for the lock.
  if (storeIsCurrent(hash)) return;
  if (!(await optional('typescript'))) refuse('@retrysafe/store\'s build (packages/store/dist)');
  say('Building @retrysafe/store (its sources changed)');
  const tsc = spawnSync(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(STORE, 'tsconfig.build.json')], { stdio: 'inherit' });
  if (tsc.status !== 0) throw new Error(`building @retrysafe/store failed (${tsc.signal ?? `exit code ${tsc.status}`})`);
  writeFileSync(STORE_STAMP, hash);
}

/** The server's entry points bundled into .build/<hash>/, built if that folder is not there yet. */
async function ensureServerBuilt() {
  const hash = hashOf(SERVER_SOURCES);
  const target = join(BUILD_DIR, hash);
  if (existsSync(join(target, 'start.mjs'))) return target;
  const esbuild = await optional('esbuild');
  if (!esbuild) refuse('The server build (.build/)');
  const started = performance.now();
  const temporary = join(BUILD_DIR, `.tmp-${process.pid}-${Date.now()}`);
  mkdirSync(temporary, { recursive: true });
  await esbuild.build({
    entryPoints: ENTRY_POINTS,
    outdir: temporary,
    outExtension: { '.js': '.mjs' },
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    // The engines' floor: import attributes (the store's package.json read with { type: 'json' }) are kept from 20.10.
    target: 'node20.19',
    packages: 'external',
    sourcemap: true,
    logLevel: 'warning',
    tsconfig: join(ROOT, 'tsconfig.json'),
    // Node resolves @retrysafe/store (external) without the retrysafe-source condition: dist/.
    banner: { js: '// Built by scripts/launch.mjs from the TypeScript sources; do not edit.' },
  });
  try {
    renameSync(temporary, target);
  } catch (error) {
    // Another start built the same sources at the same moment: its folder is the same build.
    rmSync(temporary, { recursive: true, force: true });
    if (!existsSync(join(target, 'start.mjs'))) throw error;
  }
  say(`Built the server (${relative(ROOT, target)}) in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  pruneOldBuilds(hash);
  return target;
}

/** Keeps the newest few builds (a running server may still spawn from its own), drops the rest. */
function pruneOldBuilds(current) {
  const builds = readdirSync(BUILD_DIR, { withFileTypes: true })
    .filter((entry) => entry.isDirectory() && entry.name !== current && !entry.name.startsWith('.tmp-'))
    .map((entry) => ({ path: join(BUILD_DIR, entry.name), at: statSync(join(BUILD_DIR, entry.name)).mtimeMs }))
    .sort((a, b) => b.at - a.at);
  for (const old of builds.slice(KEEP_BUILDS - 1)) rmSync(old.path, { recursive: true, force: true });
}

async function main() {
  const [command, ...args] = process.argv.slice(2);
  if (command !== 'start' && command !== 'cli' && command !== 'build') {
    process.stderr.write('usage: node scripts/launch.mjs start | cli ARGS... | build\n');
    process.exit(2);
  }
  await ensureStoreBuilt();
  const target = await ensureServerBuilt();
  if (command === 'build') {
    say(`Server build: ${relative(ROOT, target)}`);
    if (args.includes('--app')) await import(pathToFileURL(join(target, 'build-app.mjs')).href);
    return;
  }
  const entry = join(target, `${command}.mjs`);
  // Stack traces name the TypeScript sources (the build writes source maps).
  process.setSourceMapsEnabled(true);
  // The entry reads its arguments from process.argv.slice(2), as when run directly.
  process.argv = [process.argv[0], entry, ...args];
  await import(pathToFileURL(entry).href);
}

main().catch((error) => {
  say(`Start failed: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
});
