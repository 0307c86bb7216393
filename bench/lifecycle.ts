// The whole request lifecycle as a user runs it: IdempotencyStore.execute with a trivial work
// function (fingerprint, quota, claim, work, sealing, completion, flow recording), in both
// modes and both layouts, new keys and replays, at 1, 8 and 32 callers, on a freshly migrated
// (empty, never analyzed) table and on one of 10 million keys; beside the same statements
// issued raw in the same run (named, one pg.Client per caller, sequential):
//   claim-first   new: claim, completion (two commits)      replay: claim
//   transactional new: read (no committed row), BEGIN + SET LOCAL, claim, completion, COMMIT
//                 replay: read (the committed, completed row)
// Each figure comes with p50/p99, the Node CPU per request, and the statements and flights
// (round trips: a statement pipelined behind another shares its flight) per request. Then a
// sustained run from an empty table, where a plan that degrades as the table grows shows.
// Targets: store / raw >= 0.85x for new keys; transactional replay / claim-first replay >=
// 0.9x; sustained last 30 s >= 0.9x the first 30 s.
// The pooler column (at BENCH_POOLER_CALLERS, default 8 and 32, where pgbouncer is installed;
// BENCH_POOLER=0 leaves it out): the same store requests through a PgBouncer in transaction
// mode (createRetrysafe's pooler: 'transaction') in the same alternating rounds, beside the
// direct store. Target: pooled / direct >= 0.8x; Node CPU per request shown for both.
// BENCH_POOLER_DATABASE_SETTINGS=1 gives the bench database enable_seqscan = off (ALTER
// DATABASE ... SET), so the pooled store's statements go alone rather than each in a
// transaction opening with SET LOCAL (PostgresBackend's plannerSettingsInPlace).
// With a PgBouncer 1.21 or later (PGBOUNCER_PATH; scripts/build-pgbouncer.sh builds 1.24 from
// Debian's source) the pooled store runs in pooler: 'transaction-prepared' (named statements,
// max_prepared_statements = 200); BENCH_POOLER_PREPARED=0 keeps them unnamed on it.
// Where the CPU goes: beside Node's CPU per request, the whole machine's (/proc/stat: Node,
// Postgres, PgBouncer and anything else running) and PgBouncer's own (/proc/<pid>/stat), per
// request, for both sides. BENCH_POOLER_OWN_CPU=1 runs the pooler as production does, on a CPU
// of its own: PgBouncer pinned to the last CPU, Node and the bench cluster's Postgres processes
// to the others, for both sides of those rounds (so direct runs on one CPU fewer too).
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { randomBytes, randomUUID } from 'node:crypto';
import { newCorrelationId } from '@retrysafe/store';
import pg from 'pg';
import type { ExecutionMode, PoolerMode } from '@retrysafe/store';
import { LiveKeyQuota } from '@retrysafe/store';
import { ResponseKeyRing } from '@retrysafe/store';
import { partitionedStatementTexts, plannerSettingsInPlace, STORE_POOL_SETTINGS, STORE_POOLER_POOL_SETTINGS, STORE_SESSION_OPTIONS, storeStatementTexts } from '@retrysafe/store/postgres';
import { IdempotencyStore, type IdempotentCall } from '@retrysafe/store';
import { FlowRecorder } from '@retrysafe/store';
import { checkRequestPathPlans } from '../packages/store/test/helpers/request-path-plans';
import { hasPgBouncer, pgBouncerPrepares, pgBouncerVersion, startPgBouncer, type PgBouncer } from '../packages/store/test/helpers/pgbouncer';
import { openBenchDatabase } from './database';
import { loadCompletedKeys, BENCH_ENDPOINT, BENCH_SERVICE, benchBody, benchPolicy, benchResponse } from './fixtures';
import { processCpuUs, runClosedLoop, type RunResult } from './measure';

type Layout = 'plain' | 'partitioned';

/** A comma-separated environment variable of known values (all of them when unset). */
function parseList<const T extends string>(name: string, known: readonly T[]): T[] {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return [...known];
  const wanted = raw.split(',').map((item) => item.trim());
  const unknown = wanted.filter((item) => !(known as readonly string[]).includes(item));
  if (unknown.length > 0) throw new Error(`${name}: unknown ${unknown.join(', ')} (known: ${known.join(', ')})`);
  return known.filter((item) => wanted.includes(item));
}
type Keys = 'new' | 'replay';

const CALLERS = (process.env.BENCH_CALLERS ?? '1,8,32').split(',').map(Number);
const DURATION_MS = Number(process.env.BENCH_SECONDS ?? 3) * 1000;
/** Alternating rounds per figure (BENCH_SECONDS is split between them). */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const LARGE_ROWS = Number(process.env.BENCH_LIFECYCLE_ROWS ?? 10_000_000);
const SUSTAINED_MS = Number(process.env.BENCH_SUSTAINED_SECONDS ?? 300) * 1000;
// Which layouts and tables to measure ('plain,partitioned', 'empty,large'): a subset reruns
// some cells without the others (each cell's ratio is against raw in the same run); the
// sustained run is skipped when BENCH_SUSTAINED_SECONDS is 0.
const LAYOUTS = parseList('BENCH_LAYOUTS', ['plain', 'partitioned'] as const);
const TABLES = parseList('BENCH_TABLES', ['empty', 'large'] as const);
const WINDOW_MS = 30_000;
const ENDPOINT = BENCH_ENDPOINT;
const REPLAY_KEYS_PER_CALLER = 200;
const MODES: ExecutionMode[] = ['claim-first', 'transactional'];
const POOLER_CALLERS = (process.env.BENCH_POOLER_CALLERS ?? '8,32').split(',').map(Number);
const POOLER = process.env.BENCH_POOLER !== '0' && hasPgBouncer;
const POOLER_OWN_CPU = process.env.BENCH_POOLER_OWN_CPU === '1';
/** The machine's CPUs: not availableParallelism(), which follows this process's affinity, and the pinning narrows that. */
const MACHINE_CPUS = cpus().length;
// Named statements through the pooler (pooler: 'transaction-prepared') where its PgBouncer tracks
// them (1.21 and later: PGBOUNCER_PATH names one); BENCH_POOLER_PREPARED=0 keeps them unnamed.
const POOLER_MODE: PoolerMode = pgBouncerPrepares && process.env.BENCH_POOLER_PREPARED !== '0' ? 'transaction-prepared' : 'transaction';

/** Clock ticks a second, as /proc reports CPU time (USER_HZ: 100 on Linux). */
const TICKS_PER_SECOND = 100;

/** Busy CPU time of the whole machine so far, in microseconds (every CPU's user, nice, system, irq, softirq and steal). */
function machineBusyUs(): number {
  const line = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0] ?? '';
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = line.trim().split(/\s+/).slice(1).map(Number);
  return ((user + nice + system + irq + softirq + steal) * 1e6) / TICKS_PER_SECOND;
}

/** Whether a process still runs (signal 0 checks without sending). */
function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The process whose CPU time the pooler column reports (PgBouncer's, while it runs). */
let poolerPid: number | undefined;

/** Pins `pids` (every thread of each) to `cpus` (taskset's list syntax). */
function pin(pids: number[], cpus: string): void {
  for (const pid of pids) execFileSync('taskset', ['-a', '-cp', cpus, String(pid)], { stdio: 'ignore' });
}

/** The bench cluster's Postgres processes: its postmaster (the parent of a backend of ours) and every child of it. */
async function postgresPids(db: pg.Pool): Promise<number[]> {
  const { rows } = await db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  const backend = rows[0]?.pid;
  const parentOf = (pid: string | number): number | undefined => {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    } catch {
      return undefined;
    }
  };
  const postmaster = backend === undefined ? undefined : parentOf(backend);
  if (postmaster === undefined) throw new Error('BENCH_POOLER_OWN_CPU: cannot find the Postgres postmaster (is the database on this machine?)');
  const children = readdirSync('/proc').filter((name) => /^\d+$/.test(name) && parentOf(name) === postmaster).map(Number);
  return [postmaster, ...children];
}

const policy = benchPolicy;
const body = benchBody;
const response = benchResponse;

// Every statement and flight sent by any client of this process, counted at pg.Client.query.
const wire = { statements: 0, flights: 0 };
const pendingOf = new WeakMap<object, number>();
let counting = false;
function countStatements(): void {
  if (counting) return;
  counting = true;
  const prototype = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = prototype.query;
  prototype.query = function query(this: object, ...args: unknown[]) {
    const pending = pendingOf.get(this) ?? 0;
    wire.statements += 1;
    if (pending === 0) wire.flights += 1;
    pendingOf.set(this, pending + 1);
    const settled = () => pendingOf.set(this, (pendingOf.get(this) ?? 1) - 1);
    const callback = args.at(-1);
    if (typeof callback === 'function') {
      args[args.length - 1] = (...results: unknown[]) => {
        settled();
        (callback as (...results: unknown[]) => void)(...results);
      };
      return original.apply(this, args);
    }
    const result = original.apply(this, args) as Promise<unknown> | undefined;
    void result?.then(settled, settled);
    return result;
  };
}

export interface Measured extends RunResult {
  cpuUsPerRequest: number;
  /** The whole machine's busy CPU per request (Node, Postgres, PgBouncer, anything else running). */
  machineCpuUsPerRequest: number;
  /** PgBouncer's own CPU per request (0 when no pooler runs). */
  poolerCpuUsPerRequest: number;
  statementsPerRequest: number;
  flightsPerRequest: number;
}

/**
 * Rounds of one side as one figure: requests a second over all rounds' time, per-request figures
 * weighted by each round's requests, p50 and p99 the mean of the rounds'.
 */
function combineRuns(runs: Measured[]): Measured {
  const operations = runs.reduce((sum, run) => sum + run.operations, 0);
  const seconds = runs.reduce((sum, run) => sum + run.seconds, 0);
  const weighted = (pick: (run: Measured) => number) => runs.reduce((sum, run) => sum + pick(run) * run.operations, 0) / Math.max(1, operations);
  const mean = (pick: (run: Measured) => number) => runs.reduce((sum, run) => sum + pick(run), 0) / runs.length;
  return {
    operations,
    seconds,
    perSecond: operations / seconds,
    p50Ms: mean((run) => run.p50Ms),
    p99Ms: mean((run) => run.p99Ms),
    cpuUsPerRequest: weighted((run) => run.cpuUsPerRequest),
    machineCpuUsPerRequest: weighted((run) => run.machineCpuUsPerRequest),
    poolerCpuUsPerRequest: weighted((run) => run.poolerCpuUsPerRequest),
    statementsPerRequest: weighted((run) => run.statementsPerRequest),
    flightsPerRequest: weighted((run) => run.flightsPerRequest),
  };
}

/** A closed-loop run that also reads Node CPU and the wire counters over its measured window. */
async function measure(callers: number, durationMs: number, operation: (worker: number, iteration: number) => Promise<void>): Promise<Measured> {
  let cpu = process.cpuUsage();
  let before = { ...wire };
  let after = { ...wire };
  let used = { user: 0, system: 0 };
  let machine = { from: 0, to: 0 };
  let pooler = { from: 0, to: 0 };
  const run = await runClosedLoop(callers, durationMs, operation, 300, (edge) => {
    if (edge === 'open') {
      cpu = process.cpuUsage();
      before = { ...wire };
      machine = { from: machineBusyUs(), to: 0 };
      pooler = { from: processCpuUs(poolerPid), to: 0 };
    } else {
      used = process.cpuUsage(cpu);
      after = { ...wire };
      machine.to = machineBusyUs();
      pooler.to = processCpuUs(poolerPid);
    }
  });
  const n = Math.max(1, run.operations);
  return {
    ...run,
    cpuUsPerRequest: (used.user + used.system) / n,
    machineCpuUsPerRequest: (machine.to - machine.from) / n,
    poolerCpuUsPerRequest: (pooler.to - pooler.from) / n,
    statementsPerRequest: (after.statements - before.statements) / n,
    flightsPerRequest: (after.flights - before.flights) / n,
  };
}

export interface LifecycleCase {
  layout: Layout;
  table: string;
  callers: number;
  mode: ExecutionMode;
  keys: Keys;
  raw: Measured;
  store: Measured;
  storeVsRaw: number;
  /** The same store requests through PgBouncer (transaction mode), and their rate over the direct store's. */
  pooled?: Measured;
  pooledVsDirect?: number;
}

export interface LifecycleReport {
  cases: LifecycleCase[];
  /** Transactional replays over claim-first replays, store against store, per layout, table and callers. */
  replayRatios: { layout: Layout; table: string; callers: number; ratio: number }[];
  plansAt10M: { layout: Layout; offPrimaryKey: string[] }[];
  sustained?: SustainedReport;
}

interface Harness {
  url: string;
  owner: pg.Pool;
  layout: Layout;
  run: string;
}

function texts(layout: Layout) {
  return layout === 'partitioned' ? partitionedStatementTexts : storeStatementTexts;
}

async function benchCallers(harness: Harness, table: string, callers: number, log: (line: string) => void): Promise<LifecycleCase[]> {
  const { url, owner, layout } = harness;
  const run = `${harness.run}-${callers}`;
  const principals = Array.from({ length: callers }, () => randomUUID());
  const sql = texts(layout);
  const secrets = { fingerprintSecret: randomBytes(32), keyRing: new ResponseKeyRing([{ id: 'k1', key: randomBytes(32) }]) };
  const sealedSize = secrets.keyRing.seal(response, { principalId: principals[0] ?? '', service: BENCH_SERVICE, scope: ENDPOINT, key: 'x' }).ciphertext.length;
  const sealed = randomBytes(sealedSize);

  const pool = new pg.Pool({ connectionString: url, max: callers, ...STORE_POOL_SETTINGS });
  const quota = new LiveKeyQuota(owner, { service: BENCH_SERVICE });
  quota.start();
  const recorder = new FlowRecorder(owner, { flushIntervalMs: 1_000 });
  recorder.start();
  const store = new IdempotencyStore({ pool, service: BENCH_SERVICE, ...secrets, quota, observer: recorder, layout });
  // The pooler column: a PgBouncer (transaction mode, its pool as large as the callers) in front of the same database.
  let pgbouncer: PgBouncer | undefined;
  let pooledPool: pg.Pool | undefined;
  let pooledStore: IdempotencyStore | undefined;
  if (POOLER && POOLER_CALLERS.includes(callers)) {
    pgbouncer = await startPgBouncer({ upstreamUrl: url, poolSize: callers, ...(POOLER_MODE === 'transaction-prepared' ? { maxPreparedStatements: 200 } : {}) });
    poolerPid = pgbouncer.pid;
    // A run that dies from here on still stops its PgBouncer (one outlived a failed run before).
    const started = pgbouncer;
    process.once('exit', () => started.pid !== undefined && processAlive(started.pid) && process.kill(started.pid, 'SIGKILL'));
    if (POOLER_OWN_CPU) {
      const last = MACHINE_CPUS - 1;
      if (last < 1 || pgbouncer.pid === undefined) throw new Error('BENCH_POOLER_OWN_CPU needs two CPUs or more');
      pin([pgbouncer.pid], String(last));
      pin([process.pid, ...(await postgresPids(owner))], last === 1 ? '0' : `0-${last - 1}`);
      log(`  PgBouncer pinned to CPU ${last}; Node and Postgres to ${last === 1 ? 'CPU 0' : `CPUs 0-${last - 1}`}, for both sides`);
    }
    pooledPool = new pg.Pool({ connectionString: pgbouncer.url(), max: callers, ...STORE_POOLER_POOL_SETTINGS });
    const inPlace = await plannerSettingsInPlace(pooledPool);
    log(`  pooler: PgBouncer ${pgBouncerVersion?.join('.') ?? '?'}, ${POOLER_MODE === 'transaction' ? 'unnamed statements' : 'named statements (max_prepared_statements = 200)'}, ${inPlace ? "the database's enable_seqscan = off, statements alone" : 'each statement in a transaction opening with SET LOCAL enable_seqscan = off'}`);
    pooledStore = new IdempotencyStore({ pool: pooledPool, service: BENCH_SERVICE, ...secrets, quota, observer: recorder, layout, pooler: POOLER_MODE, plannerSettingsInPlace: inPlace });
  }
  const clients = await Promise.all(
    Array.from({ length: callers }, async () => {
      const client = new pg.Client({ connectionString: url, options: STORE_SESSION_OPTIONS });
      await client.connect();
      return client;
    }),
  );

  const call = (worker: number, key: string, mode: ExecutionMode): IdempotentCall => ({
    principalId: principals[worker] ?? '',
    endpoint: ENDPOINT,
    method: 'POST',
    key,
    body,
    policy,
    mode,
    work: () => Promise.resolve({ status: 201, contentType: 'application/json', body: response }),
  });
  const replayKey = (mode: ExecutionMode, worker: number, i: number) => `replay-${mode}-${run}-${worker}-${i % REPLAY_KEYS_PER_CALLER}`;
  // Warm each principal's quota entry and the pool, and make the keys the replays read.
  for (const mode of MODES) {
    await Promise.all(
      principals.map(async (_, worker) => {
        for (let i = 0; i < REPLAY_KEYS_PER_CALLER; i += 1) await store.execute(call(worker, replayKey(mode, worker, i), mode));
      }),
    );
  }

  // Each statement's parameters in its order (statements.ts): the service is the last.
  const claimValues = (worker: number, key: string) => [principals[worker], ENDPOINT, key, randomBytes(32), newCorrelationId(), policy.leaseMs, policy.retentionMs, BENCH_SERVICE];
  const raw = async (mode: ExecutionMode, keys: Keys, worker: number, i: number) => {
    const client = clients[worker];
    if (!client) throw new Error('no client');
    const key = keys === 'new' ? `raw-${mode}-${run}-${worker}-${i}` : replayKey(mode, worker, i);
    const claimName = layout === 'partitioned' ? 'raw_claim_partitioned' : 'raw_claim';
    const claim = () => client.query({ name: claimName, text: sql.claim, values: claimValues(worker, key) });
    const complete = () =>
      client.query({
        name: layout === 'partitioned' ? 'raw_complete_partitioned' : 'raw_complete',
        text: sql.complete,
        values: [principals[worker], ENDPOINT, key, 1, 201, 'application/json', sealed, 'k1', response.length, null, BENCH_SERVICE],
      });
    if (mode === 'claim-first') {
      await claim();
      if (keys === 'new') await complete();
      return;
    }
    // Transactional: the read of a committed row first (a replay ends there), then the claim,
    // completion and commit in one transaction.
    await client.query({ name: layout === 'partitioned' ? 'raw_read_partitioned' : 'raw_read', text: sql.readKey, values: [principals[worker], ENDPOINT, key, BENCH_SERVICE] });
    if (keys === 'replay') return;
    await client.query(`BEGIN; SET LOCAL lock_timeout = ${policy.lockTimeoutMs}`);
    await claim();
    await complete();
    await client.query('COMMIT');
  };
  const viaStore = async (mode: ExecutionMode, keys: Keys, worker: number, i: number, through = store, prefix = 'store') => {
    const key = keys === 'new' ? `${prefix}-${mode}-${run}-${worker}-${i}` : replayKey(mode, worker, i);
    const outcome = await through.execute(call(worker, key, mode));
    if (outcome.replayed !== (keys === 'replay')) throw new Error(`expected ${keys === 'replay' ? 'a replay' : 'a new key'}`);
  };

  // Raw and store in alternating rounds (raw first, then store first, ...), so neither side
  // always runs on the larger table, after the other's warm-up, or into the same checkpoint.
  const cases: LifecycleCase[] = [];
  for (const mode of MODES) {
    for (const keys of ['new', 'replay'] as const) {
      const rawRuns: Measured[] = [];
      const storeRuns: Measured[] = [];
      const pooledRuns: Measured[] = [];
      let iteration = 0;
      for (let round = 0; round < ROUNDS; round += 1) {
        const sides = [
          async () => rawRuns.push(await measure(callers, DURATION_MS / ROUNDS, (worker) => raw(mode, keys, worker, (iteration += 1)))),
          async () => storeRuns.push(await measure(callers, DURATION_MS / ROUNDS, (worker) => viaStore(mode, keys, worker, (iteration += 1)))),
        ];
        const through = pooledStore;
        if (through) sides.push(async () => pooledRuns.push(await measure(callers, DURATION_MS / ROUNDS, (worker) => viaStore(mode, keys, worker, (iteration += 1), through, 'pooled'))));
        for (const side of round % 2 === 0 ? sides : sides.reverse()) await side();
      }
      const rawRun = combineRuns(rawRuns);
      const storeRun = combineRuns(storeRuns);
      const pooledRun = pooledRuns.length > 0 ? combineRuns(pooledRuns) : undefined;
      cases.push({
        layout,
        table,
        callers,
        mode,
        keys,
        raw: rawRun,
        store: storeRun,
        storeVsRaw: storeRun.perSecond / rawRun.perSecond,
        ...(pooledRun ? { pooled: pooledRun, pooledVsDirect: pooledRun.perSecond / storeRun.perSecond } : {}),
      });
    }
  }
  await recorder.stop();
  await quota.stop();
  await Promise.all(clients.map((client) => client.end()));
  await pool.end();
  await pooledPool?.end();
  await pgbouncer?.stop();
  poolerPid = undefined;
  if (POOLER_OWN_CPU && pgbouncer) pin([process.pid, ...(await postgresPids(owner))], `0-${MACHINE_CPUS - 1}`);

  log(`\n${layout} layout, ${table}, ${callers} caller(s)`);
  log(`  ${'mode'.padEnd(13)} ${'keys'.padEnd(6)} ${'raw/s'.padStart(7)} ${'store/s'.padStart(7)} ${'ratio'.padStart(6)}   p50 raw/store   p99 raw/store   CPU us/req raw/store   stmts raw/store   flights raw/store`);
  for (const c of cases) {
    const pair = (a: number, b: number, digits: number) => `${a.toFixed(digits)}/${b.toFixed(digits)}`;
    log(
      `  ${c.mode.padEnd(13)} ${c.keys.padEnd(6)} ${c.raw.perSecond.toFixed(0).padStart(7)} ${c.store.perSecond.toFixed(0).padStart(7)} ${`${c.storeVsRaw.toFixed(2)}x`.padStart(6)}` +
        `   ${pair(c.raw.p50Ms, c.store.p50Ms, 2).padStart(13)}   ${pair(c.raw.p99Ms, c.store.p99Ms, 2).padStart(13)}   ${pair(c.raw.cpuUsPerRequest, c.store.cpuUsPerRequest, 0).padStart(20)}` +
        `   ${pair(c.raw.statementsPerRequest, c.store.statementsPerRequest, 1).padStart(15)}   ${pair(c.raw.flightsPerRequest, c.store.flightsPerRequest, 1).padStart(17)}`,
    );
  }
  const replay = (mode: ExecutionMode) => cases.find((c) => c.mode === mode && c.keys === 'replay')?.store.perSecond ?? NaN;
  log(`  transactional replay / claim-first replay: ${(replay('transactional') / replay('claim-first')).toFixed(2)}x (target >= 0.90x)`);
  if (cases.some((c) => c.pooled)) {
    log(`  through PgBouncer (transaction mode) beside the same store direct (target >= 0.80x):`);
    log(`  ${'mode'.padEnd(13)} ${'keys'.padEnd(6)} ${'direct/s'.padStart(8)} ${'pooled/s'.padStart(8)} ${'ratio'.padStart(6)}   p50 direct/pooled   p99 direct/pooled   CPU us/req direct/pooled   stmts direct/pooled   flights direct/pooled   machine CPU us/req direct/pooled (PgBouncer's)`);
    for (const c of cases) {
      if (!c.pooled) continue;
      const pair = (a: number, b: number, digits: number) => `${a.toFixed(digits)}/${b.toFixed(digits)}`;
      log(
        `  ${c.mode.padEnd(13)} ${c.keys.padEnd(6)} ${c.store.perSecond.toFixed(0).padStart(8)} ${c.pooled.perSecond.toFixed(0).padStart(8)} ${`${(c.pooledVsDirect ?? NaN).toFixed(2)}x`.padStart(6)}` +
          `   ${pair(c.store.p50Ms, c.pooled.p50Ms, 2).padStart(17)}   ${pair(c.store.p99Ms, c.pooled.p99Ms, 2).padStart(17)}   ${pair(c.store.cpuUsPerRequest, c.pooled.cpuUsPerRequest, 0).padStart(24)}` +
          `   ${pair(c.store.statementsPerRequest, c.pooled.statementsPerRequest, 1).padStart(19)}   ${pair(c.store.flightsPerRequest, c.pooled.flightsPerRequest, 1).padStart(21)}` +
          `   ${pair(c.store.machineCpuUsPerRequest, c.pooled.machineCpuUsPerRequest, 0).padStart(12)} (${c.pooled.poolerCpuUsPerRequest.toFixed(0)})`,
      );
    }
  }
  return cases;
}

async function loadLarge(harness: Harness, log: (line: string) => void): Promise<void> {
  const started = performance.now();
  const { rows } = await harness.owner.query<{ from: Date }>("SELECT now() + interval '1 hour' AS from");
  await loadCompletedKeys(harness.owner, LARGE_ROWS, rows[0]?.from ?? new Date());
  await harness.owner.query('ANALYZE idempotency_keys');
  log(`  loaded ${LARGE_ROWS.toLocaleString('en')} live keys and analyzed them in ${((performance.now() - started) / 1000).toFixed(0)} s`);
}

export async function benchLifecycle(adminUrl: string, log: (line: string) => void): Promise<LifecycleReport> {
  countStatements();
  const report: LifecycleReport = { cases: [], replayRatios: [], plansAt10M: [] };
  for (const layout of LAYOUTS) {
    const database = await openBenchDatabase({ layout, adminUrl });
    const owner = new pg.Pool({ connectionString: database.url, max: 4 });
    if (POOLER && process.env.BENCH_POOLER_DATABASE_SETTINGS === '1') await owner.query(`ALTER DATABASE ${new URL(database.url).pathname.slice(1)} SET enable_seqscan = off`);
    const harness: Harness = { url: database.url, owner, layout, run: randomUUID().slice(0, 8) };
    try {
      for (const size of TABLES) {
        const table = size === 'empty' ? 'empty table' : `${(LARGE_ROWS / 1e6).toFixed(0)} M keys`;
        if (size === 'large') {
          await loadLarge(harness, log);
          const plans = new pg.Pool({ connectionString: database.url, max: 1, options: STORE_SESSION_OPTIONS });
          const findings = await checkRequestPathPlans(plans, layout, { principalId: '00000000-0000-0000-0000-000000000007', service: BENCH_SERVICE, scope: ENDPOINT, key: 'old-7' });
          await plans.end();
          const off = findings.flatMap((finding) => finding.offPrimaryKey.map((what) => `${finding.statement} (${finding.mode}): ${what}`));
          report.plansAt10M.push({ layout, offPrimaryKey: off });
          log(`  request-path plans at ${table}: ${off.length === 0 ? `every statement through the primary key (${findings.length} plans, custom and generic)` : off.join('; ')}`);
        }
        for (const callers of CALLERS) {
          const cases = await benchCallers(harness, table, callers, log);
          report.cases.push(...cases);
          const replay = (mode: ExecutionMode) => cases.find((c) => c.mode === mode && c.keys === 'replay')?.store.perSecond ?? NaN;
          report.replayRatios.push({ layout, table, callers, ratio: replay('transactional') / replay('claim-first') });
        }
      }
    } finally {
      await owner.end();
      await database.close();
    }
  }
  if (SUSTAINED_MS > 0) report.sustained = await benchSustained(adminUrl, log);
  return report;
}

export interface SustainedReport {
  mode: ExecutionMode;
  callers: number;
  perWindow: number[];
  lastVsFirst: number;
  rowsAtEnd: number;
}

/** Claim-first new keys (claim and completion) at 8 callers from an empty table, counted per 30 s. */
async function benchSustained(adminUrl: string, log: (line: string) => void): Promise<SustainedReport> {
  const callers = 8;
  const mode: ExecutionMode = 'claim-first';
  const database = await openBenchDatabase({ adminUrl });
  const owner = new pg.Pool({ connectionString: database.url, max: 4 });
  const pool = new pg.Pool({ connectionString: database.url, max: callers, ...STORE_POOL_SETTINGS });
  const quota = new LiveKeyQuota(owner, { service: BENCH_SERVICE });
  const recorder = new FlowRecorder(owner, { flushIntervalMs: 1_000 });
  quota.start();
  recorder.start();
  const store = new IdempotencyStore({ pool, service: BENCH_SERVICE, fingerprintSecret: randomBytes(32), keyRing: new ResponseKeyRing([{ id: 'k1', key: randomBytes(32) }]), quota, observer: recorder });
  const principals = Array.from({ length: callers }, () => randomUUID());
  const windows = Math.max(2, Math.round(SUSTAINED_MS / WINDOW_MS));
  const perWindow = Array.from({ length: windows }, () => 0);
  log(`\nsustained: ${mode}, new keys, ${callers} callers, ${windows} x 30 s from an empty table`);
  const began = performance.now();
  const end = began + windows * WINDOW_MS;
  try {
    await Promise.all(
      principals.map(async (principalId, worker) => {
        for (let i = 0; performance.now() < end; i += 1) {
          await store.execute({ principalId, endpoint: ENDPOINT, method: 'POST', key: `sustained-${worker}-${i}`, body, policy, mode, work: () => Promise.resolve({ status: 201, contentType: 'application/json', body: response }) });
          const window = Math.floor((performance.now() - began) / WINDOW_MS);
          if (window < windows) perWindow[window] = (perWindow[window] ?? 0) + 1;
        }
      }),
    );
    const { rows } = await owner.query<{ n: number }>('SELECT count(*)::int AS n FROM idempotency_keys');
    const first = (perWindow[0] ?? 0) / 30;
    const last = (perWindow.at(-1) ?? 0) / 30;
    log(`  requests/s per 30 s: ${perWindow.map((count) => (count / 30).toFixed(0)).join(', ')}`);
    log(`  last 30 s / first 30 s: ${(last / first).toFixed(2)}x (target >= 0.90x), ${(rows[0]?.n ?? 0).toLocaleString('en')} keys at the end`);
    return { mode, callers, perWindow: perWindow.map((count) => count / 30), lastVsFirst: last / first, rowsAtEnd: rows[0]?.n ?? 0 };
  } finally {
    await recorder.stop();
    await quota.stop();
    await pool.end();
    await owner.end();
    await database.close();
  }
}
