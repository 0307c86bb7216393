// The store's Node CPU per request beside the same statements issued raw, for finding where it
// goes (`node --cpu-prof`) and for comparing changes: one caller, new keys, each mode, rounds of
// every side alternating so all see the same machine. CPU per request is much less sensitive to
// a shared machine's load than requests per second (though not immune: compare sides of one run,
// not runs). Not part of `npm run bench`:
//   node --conditions=retrysafe-source --import tsx bench/lifecycle-cpu.ts [plain|partitioned] [module ...]
// Each module is a build of @retrysafe/store to measure (default: the package itself), e.g. a
// dist/index.js compiled from another commit. Env: CPU_ROUNDS (default 9), CPU_REQUESTS per round
// (default 500), CPU_SIDES (default raw,store; `pool` is the raw statements through a pool like
// the store's, one checkout per statement; one side alone for a profile of it), CPU_MODES
// (default claim-first,transactional).
import { randomBytes, randomUUID } from 'node:crypto';
import { newCorrelationId } from '@retrysafe/store';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import type * as Store from '@retrysafe/store';
import { partitionedStatementTexts, STORE_POOL_SETTINGS, STORE_SESSION_OPTIONS, storeStatementTexts } from '@retrysafe/store/postgres';
import { openBenchDatabase } from './database';
import { BENCH_ENDPOINT, BENCH_SERVICE, benchBody, benchPolicy, benchResponse } from './fixtures';

type Mode = Store.ExecutionMode;
const layout = (process.argv[2] ?? 'plain') as 'plain' | 'partitioned';
const MODULES = process.argv.length > 3 ? process.argv.slice(3) : ['@retrysafe/store'];
const ROUNDS = Number(process.env.CPU_ROUNDS ?? 9);
const REQUESTS = Number(process.env.CPU_REQUESTS ?? 500);
const SIDES = (process.env.CPU_SIDES ?? 'raw,store').split(',');
const MODES = (process.env.CPU_MODES ?? 'claim-first,transactional').split(',') as Mode[];

const sorted = (values: number[]) => [...values].sort((a, b) => a - b);
const median = (values: number[]) => sorted(values)[Math.floor(values.length / 2)] ?? NaN;

/** System (kernel) time per request of the last cpuPerRequest, by side name. */
const systemOf = new Map<string, number[]>();

async function cpuPerRequest(requests: number, operation: (i: number) => Promise<void>, name?: string): Promise<number> {
  const started = process.cpuUsage();
  for (let i = 0; i < requests; i += 1) await operation(i);
  const used = process.cpuUsage(started);
  if (name !== undefined) systemOf.set(name, [...(systemOf.get(name) ?? []), used.system / requests]);
  return (used.user + used.system) / requests;
}

async function main(): Promise<void> {
  const database = await openBenchDatabase({ layout });
  const owner = new pg.Pool({ connectionString: database.url, max: 2 });
  const pool = new pg.Pool({ connectionString: database.url, max: 1, ...STORE_POOL_SETTINGS });
  const client = new pg.Client({ connectionString: database.url, options: STORE_SESSION_OPTIONS });
  await client.connect();
  const principalId = randomUUID();
  const sql = layout === 'partitioned' ? partitionedStatementTexts : storeStatementTexts;
  const run = randomUUID().slice(0, 8);
  const policy = benchPolicy;
  const stoppers: (() => Promise<void>)[] = [];

  // One store per module, each on its own pool (as the lifecycle bench's), recorder and quota.
  const stores = new Map<string, Store.IdempotencyStore>();
  let sealedLength = 0;
  for (const [index, specifier] of MODULES.entries()) {
    const module = (await import(specifier.startsWith('.') || specifier.startsWith('/') ? pathToFileURL(specifier).href : specifier)) as typeof Store;
    const storePool = new pg.Pool({ connectionString: database.url, max: 1, ...STORE_POOL_SETTINGS });
    // Its own pool for the recorder and quota: builds of two commits may name a statement alike
    // with different texts, which one pg connection refuses (and the run died without cleaning up).
    const ownerOfModule = MODULES.length === 1 ? owner : new pg.Pool({ connectionString: database.url, max: 2 });
    const quota = new module.LiveKeyQuota(ownerOfModule, { service: BENCH_SERVICE });
    const recorder = new module.FlowRecorder(ownerOfModule, { flushIntervalMs: 1_000 });
    quota.start();
    recorder.start();
    stoppers.push(async () => {
      await recorder.stop();
      await quota.stop();
      await storePool.end();
      if (ownerOfModule !== owner) await ownerOfModule.end();
    });
    const keyRing = new module.ResponseKeyRing([{ id: 'k1', key: randomBytes(32) }]);
    sealedLength = keyRing.seal(benchResponse, { principalId, service: BENCH_SERVICE, scope: BENCH_ENDPOINT, key: 'x' }).ciphertext.length;
    stores.set(MODULES.length === 1 ? 'store' : `store${index + 1}`, new module.IdempotencyStore({ pool: storePool, service: BENCH_SERVICE, fingerprintSecret: randomBytes(32), keyRing, quota, observer: recorder, layout }));
  }
  const sealed = randomBytes(sealedLength);

  // The same statements as bench/lifecycle.ts's raw baseline, on one client or through the pool.
  const rawOn = (db: pg.Pool | pg.Client) => async (mode: Mode, key: string) => {
    const claimValues = () => [principalId, BENCH_ENDPOINT, key, randomBytes(32), newCorrelationId(), policy.leaseMs, policy.retentionMs, BENCH_SERVICE];
    const completeValues = () => [principalId, BENCH_ENDPOINT, key, 1, 201, 'application/json', sealed, 'k1', benchResponse.length, null, BENCH_SERVICE];
    if (mode === 'claim-first') {
      await db.query({ name: 'raw_claim', text: sql.claim, values: claimValues() });
      await db.query({ name: 'raw_complete', text: sql.complete, values: completeValues() });
      return;
    }
    await db.query({ name: 'raw_read', text: sql.readKey, values: [principalId, BENCH_ENDPOINT, key, BENCH_SERVICE] });
    const tx = db instanceof pg.Pool ? await db.connect() : db;
    try {
      await tx.query(`BEGIN; SET LOCAL lock_timeout = ${policy.lockTimeoutMs}`);
      await tx.query({ name: 'raw_claim', text: sql.claim, values: claimValues() });
      await tx.query({ name: 'raw_complete', text: sql.complete, values: completeValues() });
      await tx.query('COMMIT');
    } finally {
      if (tx !== db) (tx as pg.PoolClient).release();
    }
  };
  const viaStore = (store: Store.IdempotencyStore) => async (mode: Mode, key: string) => {
    const outcome = await store.execute({
      principalId,
      endpoint: BENCH_ENDPOINT,
      method: 'POST',
      key,
      body: benchBody,
      policy,
      mode,
      work: () => Promise.resolve({ status: 201, contentType: 'application/json', body: benchResponse }),
    });
    if (outcome.replayed) throw new Error('expected a new key');
  };
  const sides = new Map<string, (mode: Mode, key: string) => Promise<void>>([
    ['raw', rawOn(client)],
    ['pool', rawOn(pool)],
  ]);
  for (const [name, store] of stores) sides.set(name, viaStore(store));
  const names = SIDES.flatMap((side) => (side === 'store' ? [...stores.keys()] : [side]));
  const sideOf = (name: string) => {
    const operation = sides.get(name);
    if (!operation) throw new Error(`CPU_SIDES: no side "${name}" (raw, pool, store)`);
    return operation;
  };

  try {
    process.stdout.write(`${layout} layout, 1 caller, new keys, ${ROUNDS} rounds of ${REQUESTS} requests; Node CPU us per request (median over rounds; min; of it system time, median)\n`);
    if (MODULES.length > 1) process.stdout.write(MODULES.map((specifier, index) => `  store${index + 1}: ${specifier}\n`).join(''));
    for (const mode of MODES) {
      // Warm up every side (named statements parsed, quota entries loaded, JIT).
      for (const name of names) await cpuPerRequest(300, (i) => sideOf(name)(mode, `warm-${name}-${mode}-${run}-${i}`));
      const rounds = new Map(names.map((name) => [name, [] as number[]]));
      for (let round = 0; round < ROUNDS; round += 1) {
        for (const name of names) rounds.get(name)?.push(await cpuPerRequest(REQUESTS, (i) => sideOf(name)(mode, `${name}-${mode}-${run}-${round}-${i}`), `${mode}:${name}`));
      }
      const figures = names
        .map((name) => `${name} ${median(rounds.get(name) ?? []).toFixed(0).padStart(4)} (min ${(sorted(rounds.get(name) ?? [])[0] ?? NaN).toFixed(0)}, sys ${median(systemOf.get(`${mode}:${name}`) ?? []).toFixed(0)})`)
        .join('  ');
      process.stdout.write(`  ${mode.padEnd(13)} ${figures}\n`);
    }
  } finally {
    // Each step whatever the one before did: the bench's own database is always stopped.
    const steps = [...stoppers, () => client.end(), () => pool.end(), () => owner.end()];
    for (const step of steps) await step().catch((error: unknown) => process.stderr.write(`while stopping: ${(error as Error).message}\n`));
    await database.close();
  }
}

void main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
