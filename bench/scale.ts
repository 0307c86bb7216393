// `npm run bench -- scale`: the key store at the lesson's scale in a memory-bound Postgres.
// Postgres runs in a cgroup v1 memory cgroup (BENCH_SCALE_MEMORY, default 2 GiB; shared_buffers a
// quarter of it; while a step loads, BENCH_SCALE_LOAD_MEMORY, default 8 GiB, set back and the
// cgroup's page cache emptied before the step is measured). For each layout (plain,
// day-partitioned; BENCH_SCALE_LAYOUTS), one at a time on the same disk, the loader
// (bench/scale-loader.ts) fills the key table step by step (afresh with COPY ... FREEZE while the
// rows already there are at most an eighth of the step, appended after) up to BENCH_SCALE_ROWS live keys
// (default 86,400,000: 1,000 writes a second for 24 h; steps 1 M, 2 M, 5 M, 10 M, 20 M, 43.2 M,
// 86.4 M, or BENCH_SCALE_STEPS), expiries spread over the next 24 h, keys random (UUIDv4) or
// time-ordered (UUIDv7, BENCH_SCALE_KEYS=time-ordered; the claims' keys too). At each step: heap,
// unique-index and total bytes; then claim-first new keys through the store's execute (quota,
// claim, work, sealing, completion) at 8 callers for BENCH_SCALE_SECONDS (default 30) after
// BENCH_SCALE_WARMUP_SECONDS (default 5): throughput, p50, p99, p99.9, the buffer hit ratio and the
// blocks read per claim (pg_stat_database and the key table's pg_statio deltas over the measured
// window). Results to artifacts/bench/scale.json, rewritten after every step.
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { availableParallelism, cpus } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { IdempotencyStore, LiveKeyQuota, ResponseKeyRing, ignoreFlow, type EndpointPolicy, type IdempotentCall } from '@retrysafe/store';
import { STORE_POOL_SETTINGS } from '@retrysafe/store/postgres';
import { percentile } from './measure';
import { startBoundedCluster, type BoundedCluster, type CgroupMemory } from './scale-cluster';
import { createLayoutDatabase, dropDatabase, loadScaleRows, registerScalePolicies, writeLoaderSecrets, type LoadTimes } from './scale-loader';
import { KEY_ORDERS, NEW_KEY_RESPONSE, PAYMENTS_SCOPE, principalOf, SCALE_SERVICE, uuidV7, type KeyOrder } from './scale-rows';

type Layout = 'plain' | 'partitioned';
const GIB = 1024 ** 3;
const DAY_MS = 86_400_000;
const CALLERS = 8;
const DEFAULT_STEPS = [1_000_000, 2_000_000, 5_000_000, 10_000_000, 20_000_000, 43_200_000, 86_400_000];

/** Bytes from `2GiB`, `512MiB`, `2G`, `2147483648`. */
export function parseBytes(text: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(k|m|g|t)?(i?b)?\s*$/i.exec(text);
  if (!match) throw new Error(`not a size: ${text}`);
  const units: Record<string, number> = { k: 1024, m: 1024 ** 2, g: GIB, t: 1024 ** 4 };
  const unit = units[(match[2] ?? '').toLowerCase()] ?? 1;
  return Math.floor(Number(match[1]) * unit);
}

const ROWS = Number(process.env.BENCH_SCALE_ROWS ?? 86_400_000);
const MEMORY = parseBytes(process.env.BENCH_SCALE_MEMORY ?? '2GiB');
const SECONDS = Number(process.env.BENCH_SCALE_SECONDS ?? 30);
const WARMUP_SECONDS = Number(process.env.BENCH_SCALE_WARMUP_SECONDS ?? 5);
const PRINCIPALS = Number(process.env.BENCH_SCALE_PRINCIPALS ?? 5_000);
const STEPS = (process.env.BENCH_SCALE_STEPS ? process.env.BENCH_SCALE_STEPS.split(',').map(Number) : [...DEFAULT_STEPS.filter((step) => step < ROWS), ROWS]).sort((a, b) => a - b);
const LAYOUT_NAMES = (process.env.BENCH_SCALE_LAYOUTS ?? 'plain,partitioned').split(',').map((layout) => layout.trim());
const isLayout = (name: string): name is Layout => name === 'plain' || name === 'partitioned';
const LAYOUTS = LAYOUT_NAMES.filter(isLayout);
const STREAMS = Number(process.env.BENCH_SCALE_LOAD_STREAMS ?? availableParallelism());
/** Parallel workers per index build besides the leader (max_parallel_maintenance_workers). */
const INDEX_WORKERS = Number(process.env.BENCH_SCALE_INDEX_WORKERS ?? Math.max(0, STREAMS - 1));
/** The cgroup's limit while loading (its page cache of the written table throttles writeback under the measured limit); restored, and the cache emptied, before measuring. `off`: the load runs under the measured limit. */
const LOAD_MEMORY = process.env.BENCH_SCALE_LOAD_MEMORY === 'off' ? null : parseBytes(process.env.BENCH_SCALE_LOAD_MEMORY ?? '8GiB');
/** The keys' shape, loaded and claimed (bench/scale-rows.ts, KEY_ORDERS): random (UUIDv4, the common choice) or time-ordered (UUIDv7). */
const KEYS = process.env.BENCH_SCALE_KEYS ?? 'random';
const isKeyOrder = (name: string): name is KeyOrder => (KEY_ORDERS as readonly string[]).includes(name);
const SEED = 33;
/** A step is loaded afresh while the rows already there are at most this share of it (see benchLayout). */
const FRESH_UP_TO = 1 / 8;
/**
 * The server's wal_level while a step loads afresh: `minimal` (PostgreSQL's advice for bulk
 * loads, "Populating a Database": the COPY into a heap truncated in its transaction and the index
 * builds then write no WAL), the server restarted into it and out of it again, so the claims are
 * measured at `replica` as ever; `replica` loads as the server runs.
 */
const LOAD_WAL_LEVEL = process.env.BENCH_SCALE_LOAD_WAL_LEVEL ?? 'minimal';
const isWalLevel = (value: string): value is 'minimal' | 'replica' => value === 'minimal' || value === 'replica';

const policy: EndpointPolicy = {
  scopeMode: 'endpoint',
  retryWindowMs: DAY_MS,
  retentionMs: DAY_MS,
  leaseMs: 30_000,
  lockTimeoutMs: 5_000,
  maxResponseBytes: 4_096,
  liveKeyQuota: 1_000_000_000,
};

export interface ScaleStep {
  layout: Layout;
  rows: number;
  heapBytes: number;
  /** The unique key's index (every partition's, in the partitioned layout). */
  indexBytes: number;
  allIndexBytes: number;
  totalBytes: number;
  /** The newest partition's unique index (the one new claims insert into); the table's in the plain layout. */
  insertIndexBytes: number;
  claims: number;
  claimsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  p999Ms: number;
  maxMs: number;
  bufferHitRatio: number;
  blocksReadPerClaim: number;
  /** Of those, the key table's heap and indexes. */
  keyTableBlocksReadPerClaim: number;
  /** Of those, the heap's (the rest are its indexes'). */
  keyHeapBlocksReadPerClaim: number;
  memory: CgroupMemory;
  load: LoadTimes;
  /** The server's wal_level while the step loaded, and the seconds its restarts into and out of it took (0 when it loaded as it runs). */
  loadWalLevel: 'minimal' | 'replica';
  restartSeconds: number;
}

export interface ScaleReport {
  at: string;
  postgres: string;
  cpus: number;
  memoryBytes: number;
  sharedBuffersBytes: number;
  cgroup: string;
  seconds: number;
  callers: number;
  /** How the loaded and the claimed keys were made (BENCH_SCALE_KEYS). */
  keys: KeyOrder;
  steps: ScaleStep[];
}

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

/** The key table's heaps: its partitions, or the table itself in the plain layout (whose partition tree is empty). */
const KEY_TABLE_LEAVES = `SELECT relid FROM pg_partition_tree('retrysafe.idempotency_keys') WHERE isleaf
  UNION SELECT oid FROM pg_class WHERE oid = 'retrysafe.idempotency_keys'::regclass AND relkind = 'r'`;

/** The key table's sizes: every leaf (the table itself in the plain layout). Catalog reads only. */
async function sizes(db: pg.Pool): Promise<{ heapBytes: number; indexBytes: number; allIndexBytes: number; totalBytes: number; insertIndexBytes: number }> {
  const { rows } = await db.query<{ heap: string; unique_index: string; indexes: string; total: string; newest_unique: string }>(
    `WITH leaves AS (${KEY_TABLE_LEAVES}),
          unique_indexes AS (SELECT i.indrelid, pg_relation_size(i.indexrelid) AS bytes FROM pg_index i JOIN leaves l ON i.indrelid = l.relid WHERE i.indisunique)
     SELECT (SELECT sum(pg_relation_size(relid)) FROM leaves) AS heap,
            (SELECT sum(bytes) FROM unique_indexes) AS unique_index,
            (SELECT sum(pg_indexes_size(relid)) FROM leaves) AS indexes,
            (SELECT sum(pg_total_relation_size(relid)) FROM leaves) AS total,
            (SELECT u.bytes FROM unique_indexes u JOIN pg_class c ON c.oid = u.indrelid
              WHERE c.reltuples > 0 ORDER BY c.relname DESC LIMIT 1) AS newest_unique`,
  );
  const row = rows[0];
  return {
    heapBytes: Number(row?.heap ?? 0),
    indexBytes: Number(row?.unique_index ?? 0),
    allIndexBytes: Number(row?.indexes ?? 0),
    totalBytes: Number(row?.total ?? 0),
    insertIndexBytes: Number(row?.newest_unique ?? 0),
  };
}

interface Counters {
  blksRead: number;
  blksHit: number;
  keyRead: number;
  keyHeapRead: number;
}

async function counters(db: pg.Pool): Promise<Counters> {
  const { rows } = await db.query<{ blks_read: string; blks_hit: string; key_read: string; key_heap_read: string }>(
    `SELECT d.blks_read, d.blks_hit, k.key_read, k.key_heap_read
       FROM pg_stat_database d,
            (SELECT coalesce(sum(coalesce(s.heap_blks_read, 0) + coalesce(s.idx_blks_read, 0)), 0) AS key_read,
                    coalesce(sum(coalesce(s.heap_blks_read, 0)), 0) AS key_heap_read
               FROM pg_statio_all_tables s
              WHERE s.relid IN (${KEY_TABLE_LEAVES})) k
      WHERE d.datname = current_database()`,
  );
  const row = rows[0];
  return { blksRead: Number(row?.blks_read ?? 0), blksHit: Number(row?.blks_hit ?? 0), keyRead: Number(row?.key_read ?? 0), keyHeapRead: Number(row?.key_heap_read ?? 0) };
}

/** Claim-first new keys through execute at CALLERS callers: warm-up, then the measured window with the counters read around it. */
async function measureClaims(url: string, owner: pg.Pool, layout: Layout, keys: KeyOrder, secrets: { fingerprintSecret: Buffer; keyRing: ResponseKeyRing }) {
  const pool = new pg.Pool({ connectionString: url, max: CALLERS, ...STORE_POOL_SETTINGS });
  // The database is dropped (WITH FORCE) and the server restarted after a layout: an idle
  // connection cut then is not a result.
  pool.on('error', () => undefined);
  const quota = new LiveKeyQuota(owner, { service: SCALE_SERVICE });
  quota.start();
  const store = new IdempotencyStore({ pool, service: SCALE_SERVICE, ...secrets, quota, observer: ignoreFlow, layout });
  const call = (): IdempotentCall => {
    const u = Math.random();
    return {
      // New keys of the loaded principals, as skewed as the load: inserts land all over the unique index.
      principalId: principalOf(SEED, Math.floor(PRINCIPALS * u * u)),
      endpoint: PAYMENTS_SCOPE,
      method: 'POST',
      // Time-ordered: a UUIDv7 of now, after every loaded key of its principal.
      key: `order-${keys === 'random' ? randomUUID() : uuidV7(Date.now(), randomBytes(12))}`,
      body: { amount: 100 + Math.floor(Math.random() * 250_000), currency: 'EUR' },
      policy,
      mode: 'claim-first',
      work: () => Promise.resolve({ status: 201, contentType: 'application/json', body: NEW_KEY_RESPONSE }),
    };
  };
  const loop = async (ms: number, latencies?: number[]) => {
    const until = performance.now() + ms;
    await Promise.all(
      Array.from({ length: CALLERS }, async () => {
        while (performance.now() < until) {
          const began = performance.now();
          const outcome = await store.execute(call());
          latencies?.push(performance.now() - began);
          if (outcome.replayed) throw new Error('a new key was replayed');
        }
      }),
    );
  };
  try {
    await loop(WARMUP_SECONDS * 1000);
    // Backends report their statistics at most once a second: let the warm-up's land first.
    await sleep(1_500);
    const before = await counters(owner);
    const latencies: number[] = [];
    const began = performance.now();
    await loop(SECONDS * 1000, latencies);
    const seconds = (performance.now() - began) / 1000;
    await sleep(1_500);
    const after = await counters(owner);
    const sorted = Float64Array.from(latencies).sort();
    const read = after.blksRead - before.blksRead;
    const hit = after.blksHit - before.blksHit;
    return {
      claims: latencies.length,
      claimsPerSecond: latencies.length / seconds,
      p50Ms: percentile(sorted, 50),
      p99Ms: percentile(sorted, 99),
      p999Ms: percentile(sorted, 99.9),
      maxMs: sorted[sorted.length - 1] ?? Number.NaN,
      bufferHitRatio: hit / Math.max(1, hit + read),
      blocksReadPerClaim: read / Math.max(1, latencies.length),
      keyTableBlocksReadPerClaim: (after.keyRead - before.keyRead) / Math.max(1, latencies.length),
      keyHeapBlocksReadPerClaim: (after.keyHeapRead - before.keyHeapRead) / Math.max(1, latencies.length),
    };
  } finally {
    await quota.stop();
    await pool.end();
  }
}

const mb = (bytes: number) => `${(bytes / 1024 ** 2).toFixed(0)} MB`;

async function benchLayout(cluster: BoundedCluster, layout: Layout, report: ScaleReport, save: () => Promise<void>, log: (line: string) => void): Promise<void> {
  const name = `retrysafe_scale_${layout}`;
  const url = new URL(await createLayoutDatabase(cluster.adminUrl, name, layout));
  const connect = () => {
    const pool = new pg.Pool({ connectionString: url.toString(), max: STREAMS + 2 });
    pool.on('error', () => undefined);
    return pool;
  };
  let owner = connect();
  /** Restarts the server (with `settings` until the next restart) and connects afresh; its seconds. */
  const restart = async (settings?: Record<string, string | number>) => {
    const began = performance.now();
    await owner.end();
    await cluster.restart(settings);
    owner = connect();
    return (performance.now() - began) / 1000;
  };
  try {
    await registerScalePolicies(owner, policy);
    const { file, secrets } = await writeLoaderSecrets(cluster.dir);
    const storeSecrets = { fingerprintSecret: Buffer.from(secrets.fingerprintSecret, 'hex'), keyRing: new ResponseKeyRing([{ id: secrets.keyId, key: Buffer.from(secrets.key, 'hex') }]) };
    let loaded = 0;
    for (const step of STEPS) {
      if (step <= loaded) continue;
      // Load the step afresh (COPY ... FREEZE, VACUUM then has little to do) where the rows already
      // there are few: loading them again costs about 15 s a million on 2 CPUs, and VACUUM after
      // appending (every new heap page written to WAL once more) about 2.3 s a million of the new
      // rows, so afresh is the cheaper up to about an eighth of the step (docs/benchmarks.md; checked
      // again at 86.4 M with the blocking pipe: afresh from empty 17.5 min, 20 M afresh then 66.4 M
      // appended 18.2 min, the same morning).
      const fresh = loaded <= step * FRESH_UP_TO;
      const loadWalLevel = fresh && LOAD_WAL_LEVEL === 'minimal' ? 'minimal' : 'replica';
      let restartSeconds = loadWalLevel === 'minimal' ? await restart({ wal_level: 'minimal', max_wal_senders: 0 }) : 0;
      const from = fresh ? 0 : loaded;
      const count = step - from;
      log(`\n${layout}: loading ${count.toLocaleString('en')} keys (to ${step.toLocaleString('en')}) ${fresh ? `afresh, ${STREAMS} printer(s) a COPY, FREEZE` : `appended in ${STREAMS} stream(s)`}, wal_level ${loadWalLevel}...`);
      // Expiries over the 24 h from a minute from now: live keys, as a day of traffic leaves them.
      if (LOAD_MEMORY !== null) await cluster.setLoadLimit(Math.max(LOAD_MEMORY, MEMORY));
      const load = await loadScaleRows(owner, {
        fresh,
        batch: { seed: SEED, principals: PRINCIPALS, from, count, windowStartMs: Date.now() + 60_000, windowMs: DAY_MS, retentionMs: policy.retentionMs, leaseMs: policy.leaseMs, keys: report.keys },
        secretsFile: file,
        streams: STREAMS,
        maintenanceWorkMem: `${Math.max(64, Math.floor(MEMORY / 8 / 1024 ** 2))}MB`,
        indexWorkers: INDEX_WORKERS,
        serverCpuSeconds: () => cluster.cpuSeconds(),
      });
      if (LOAD_MEMORY !== null) await cluster.setLoadLimit(null);
      if (loadWalLevel === 'minimal') restartSeconds += await restart();
      loaded = step;
      const us = (seconds: number | null) => (seconds === null ? '?' : ((seconds * 1e6) / count).toFixed(1));
      log(
        `  CPU per row: row program ${us(load.rowProgramCpuSeconds)} us, COPY backends ${us(load.copyBackendCpuSeconds)} us, index builds ${us(load.indexCpuSeconds)} us, VACUUM ANALYZE ${us(load.vacuumCpuSeconds)} us (user + sys)`,
      );
      log(`  WAL: COPY ${mb(load.copyWalBytes)}, index builds ${mb(load.indexWalBytes)}, VACUUM ANALYZE ${mb(load.vacuumWalBytes)}`);
      log(
        `  COPY ${load.copySeconds.toFixed(0)} s (${(count / load.copySeconds).toFixed(0)} rows/s), indexes ${load.indexSeconds.toFixed(0)} s, VACUUM ANALYZE ${load.vacuumSeconds.toFixed(0)} s: ${load.rowsPerSecond.toFixed(0)} rows/s in all${restartSeconds > 0 ? `; restarts into wal_level minimal and out ${restartSeconds.toFixed(0)} s` : ''}`,
      );
      const size = await sizes(owner);
      const claims = await measureClaims(url.toString(), owner, layout, report.keys, storeSecrets);
      const memory = await cluster.memory();
      const entry: ScaleStep = { layout, rows: step, ...size, ...claims, memory, load, loadWalLevel, restartSeconds };
      report.steps.push(entry);
      await save();
      log(
        `  ${step.toLocaleString('en')} keys: heap ${mb(size.heapBytes)}, unique index ${mb(size.indexBytes)} (${((size.indexBytes / cluster.memoryBytes) * 100).toFixed(0)} % of memory; newest partition's ${mb(size.insertIndexBytes)}), all indexes ${mb(size.allIndexBytes)}, total ${mb(size.totalBytes)}`,
      );
      log(
        `  claims ${claims.claimsPerSecond.toFixed(0)}/s   p50 ${claims.p50Ms.toFixed(2)} ms   p99 ${claims.p99Ms.toFixed(2)} ms   p99.9 ${claims.p999Ms.toFixed(2)} ms   hit ratio ${(claims.bufferHitRatio * 100).toFixed(2)} %   blocks read/claim ${claims.blocksReadPerClaim.toFixed(3)} (key table ${claims.keyTableBlocksReadPerClaim.toFixed(3)}, of which its heap ${claims.keyHeapBlocksReadPerClaim.toFixed(3)})`,
      );
      log(`  cgroup: usage ${mb(memory.usageBytes)} (max ${mb(memory.maxUsageBytes)}), cache ${mb(memory.cacheBytes)}, rss ${mb(memory.rssBytes)}, limit hit ${memory.failCount} times`);
    }
  } finally {
    await owner.end();
  }
  await dropDatabase(cluster.adminUrl, name);
}

/** Where each layout's curve stands against its first step, and the step where the unique index outgrew memory. */
function summarise(report: ScaleReport, log: (line: string) => void): void {
  for (const layout of LAYOUTS) {
    const steps = report.steps.filter((step) => step.layout === layout);
    const first = steps[0];
    const last = steps.at(-1);
    if (!first || !last) continue;
    log(`\n${layout}: p99 at ${last.rows.toLocaleString('en')} / at ${first.rows.toLocaleString('en')}: ${(last.p99Ms / first.p99Ms).toFixed(2)}x (target for partitioned <= 2x); throughput ${(last.claimsPerSecond / first.claimsPerSecond).toFixed(2)}x (target >= 0.8x)`);
    const outgrown = steps.find((step) => step.indexBytes > report.memoryBytes);
    const overBuffers = steps.find((step) => step.indexBytes > report.sharedBuffersBytes);
    log(`  unique index over shared_buffers from ${overBuffers ? `${overBuffers.rows.toLocaleString('en')} keys` : 'no step measured'}; over the cgroup's memory from ${outgrown ? `${outgrown.rows.toLocaleString('en')} keys` : 'no step measured'}`);
  }
}

export async function benchScale(log: (line: string) => void): Promise<ScaleReport> {
  if (LAYOUTS.length !== LAYOUT_NAMES.length) throw new Error(`BENCH_SCALE_LAYOUTS: plain, partitioned (not ${LAYOUT_NAMES.join(', ')})`);
  if (!isWalLevel(LOAD_WAL_LEVEL)) throw new Error(`BENCH_SCALE_LOAD_WAL_LEVEL: minimal or replica (not ${LOAD_WAL_LEVEL})`);
  if (!isKeyOrder(KEYS)) throw new Error(`BENCH_SCALE_KEYS: ${KEY_ORDERS.join(' or ')} (not ${KEYS})`);
  if (!Number.isInteger(ROWS) || ROWS <= 0 || STEPS.some((step) => !Number.isInteger(step) || step <= 0)) throw new Error('BENCH_SCALE_ROWS and BENCH_SCALE_STEPS: positive whole numbers of keys');
  const cluster = await startBoundedCluster(MEMORY, log);
  const report: ScaleReport = {
    at: new Date().toISOString(),
    postgres: '?',
    cpus: cpus().length,
    memoryBytes: cluster.memoryBytes,
    sharedBuffersBytes: cluster.sharedBuffersBytes,
    cgroup: cluster.cgroup,
    seconds: SECONDS,
    callers: CALLERS,
    keys: KEYS,
    steps: [],
  };
  const save = async () => {
    await mkdir(join('artifacts', 'bench'), { recursive: true });
    await writeFile(join('artifacts', 'bench', 'scale.json'), JSON.stringify(report, null, 2));
  };
  try {
    const admin = new pg.Client({ connectionString: cluster.adminUrl });
    await admin.connect();
    report.postgres = (await admin.query<{ server_version: string }>('SHOW server_version')).rows[0]?.server_version ?? '?';
    await admin.end();
    log(`steps: ${STEPS.map((step) => step.toLocaleString('en')).join(', ')} keys; layouts: ${LAYOUTS.join(', ')}; ${KEYS} keys; ${SECONDS} s of claims at ${CALLERS} callers per step`);
    for (const [n, layout] of LAYOUTS.entries()) {
      // Each layout starts cold: the server restarted, the cgroup's page cache emptied.
      if (n > 0) await cluster.restart();
      await benchLayout(cluster, layout, report, save, log);
    }
    summarise(report, log);
    log(`\nwritten to ${join('artifacts', 'bench', 'scale.json')}`);
    return report;
  } finally {
    await cluster.stop();
  }
}
