// `npm run bench -- cleanup`: the steady state and the cleanup of expired keys beside a streaming
// replica (issue #33, point 3; the lesson: a mass delete of expired rows causes "lock contention and
// replication lag during cleanup", partition drops avoid it).
//
// A primary and a hot standby of their own (test/helpers/replica.ts: pg_basebackup -R, streaming,
// fsync on here), the machine's newest PostgreSQL. For each layout (BENCH_CLEANUP_LAYOUTS, default
// plain,partitioned), in a database of its own:
// 1. Steady state (both layouts; BENCH_CLEANUP_STEADY_LAYOUTS): new keys through the store's
//    execute at a fixed rate (BENCH_CLEANUP_RATE a second, open loop) with a short retention
//    (BENCH_CLEANUP_RETENTION_SECONDS, default 600) for BENCH_CLEANUP_WINDOWS retentions (default
//    3), the product's sweeper on its default interval (BENCH_CLEANUP_SWEEP_SECONDS, default 60).
//    Every 5 s: live rows, the oldest row's age, rows past their expiry, the replica's lag. Judged
//    over the last window: rows within 10 % of rate x retention, the oldest row within retention
//    plus one sweep interval.
// 2. Cleanup, the same expired rows removed two ways: BENCH_CLEANUP_BACKLOG expired rows
//    (default 2,000,000, yesterday's, shaped like the demo's traffic by the scale bench's loader),
//    removed by the product's cleanup (the chunked sweeper in the plain layout, the partition drop
//    in the partitioned one), then loaded again and removed by one unbounded DELETE, with the same
//    traffic running: WAL bytes the cleanup wrote (beyond the traffic's own), the longest claim
//    during it, and the replica's replay lag (bytes and seconds, pg_stat_replication every 100 ms).
// Results to artifacts/bench/cleanup.json.
import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import pg from 'pg';
import { IdempotencyStore, LiveKeyQuota, ResponseKeyRing, ignoreFlow, type EndpointPolicy, type IdempotentCall } from '@retrysafe/store';
import { STORE_POOL_SETTINGS } from '@retrysafe/store/postgres';
import { Sweeper, sweepOnce, type SweepResult } from '../server/retention/sweeper';
import { findReplicaBinaries, startStreamingReplica, type StreamingReplica } from '../test/helpers/replica';
import { percentile } from './measure';
import { createLayoutDatabase, dropDatabase, loadScaleRows, registerScalePolicies, walPosition, writeLoaderSecrets } from './scale-loader';
import { NEW_KEY_RESPONSE, PAYMENTS_SCOPE, principalOf, SCALE_SERVICE } from './scale-rows';

type Layout = 'plain' | 'partitioned';
const isLayout = (name: string): name is Layout => name === 'plain' || name === 'partitioned';

const RATE = Number(process.env.BENCH_CLEANUP_RATE ?? 300);
const RETENTION_SECONDS = Number(process.env.BENCH_CLEANUP_RETENTION_SECONDS ?? 600);
const WINDOWS = Number(process.env.BENCH_CLEANUP_WINDOWS ?? 3);
const SWEEP_SECONDS = Number(process.env.BENCH_CLEANUP_SWEEP_SECONDS ?? 60);
const BACKLOG = Number(process.env.BENCH_CLEANUP_BACKLOG ?? 2_000_000);
const LAYOUT_NAMES = (process.env.BENCH_CLEANUP_LAYOUTS ?? 'plain,partitioned').split(',').map((name) => name.trim());
const STEADY_NAMES = (process.env.BENCH_CLEANUP_STEADY_LAYOUTS ?? 'plain,partitioned').split(',').map((name) => name.trim()).filter(Boolean);
const PRINCIPALS = 5_000;
const SEED = 34;
const MAX_IN_FLIGHT = 64;
const SAMPLE_MS = 5_000;
const LAG_SAMPLE_MS = 100;
const BASELINE_MS = 10_000;

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

export interface SteadySample {
  atSeconds: number;
  rows: number;
  expiredRows: number;
  oldestAgeSeconds: number;
  lagBytes: number;
}

export interface SteadyState {
  layout: Layout;
  rate: number;
  /** Claims a second actually made over the run. */
  achievedRate: number;
  retentionSeconds: number;
  sweepSeconds: number;
  windows: number;
  samples: SteadySample[];
  /** Over the last window. */
  maxRows: number;
  minRows: number;
  expectedRows: number;
  maxOldestAgeSeconds: number;
  rowsWithin10Percent: boolean;
  oldestWithinRetentionPlusSweep: boolean;
  sweeps: { rowsDeleted: number; chunks: number; longestChunkMs: number; partitionsDropped: number }[];
  claimP99Ms: number;
  claimMaxMs: number;
  /** Claims that threw, by message. */
  failedClaims: number;
  errors: Record<string, number>;
  /** Arrivals not started because MAX_IN_FLIGHT claims were already running. */
  droppedClaims: number;
}

export interface CleanupRun {
  layout: Layout;
  method: 'sweeper' | 'partition-drop' | 'unbounded-delete';
  rowsRemoved: number;
  seconds: number;
  /** WAL written during the cleanup, less the traffic's own at its baseline rate. */
  walBytes: number;
  walBytesPerRow: number;
  /** Traffic alone, just before. */
  baselineWalBytesPerSecond: number;
  baselineClaimP99Ms: number;
  baselineClaimMaxMs: number;
  /** Claims that started while the cleanup ran. */
  claimsDuring: number;
  claimP99MsDuring: number;
  longestClaimMsDuring: number;
  failedClaimsDuring: number;
  /** The run's failures by message, and its arrivals not started (MAX_IN_FLIGHT already running), before, during and after the cleanup. */
  errors: Record<string, number>;
  droppedClaims: number;
  /** The primary's active client backends by wait event, summed over the samples taken while the cleanup ran (every 100 ms). */
  waitsDuring: Record<string, number>;
  maxReplayLagBytes: number;
  maxReplayLagSeconds: number;
  /** From the cleanup's end until the standby had replayed all of it. */
  catchUpSeconds: number;
}

export interface CleanupReport {
  at: string;
  postgres: string;
  rate: number;
  backlog: number;
  steady: SteadyState[];
  cleanups: CleanupRun[];
}

/** The largest of `values` (0 for none), without spreading them into arguments (hundreds of thousands of claims overflow the stack). */
function largest(values: readonly number[]): number {
  return values.reduce((max, value) => (value > max ? value : max), 0);
}

/** The p-th percentile of unsorted values. */
const percentileOf = (values: readonly number[], p: number): number => percentile(Float64Array.from(values).sort(), p);

interface Claim {
  startedAt: number;
  ms: number;
  failed: boolean;
}

/** New keys at a fixed rate (open loop: a slow claim does not slow the arrivals; at most MAX_IN_FLIGHT at once, the rest counted as dropped). */
class Traffic {
  readonly claims: Claim[] = [];
  dropped = 0;
  /** Each failure's message (never a key or a body: the store's errors name neither) and how often. */
  readonly errors = new Map<string, number>();
  private inFlight = 0;
  private timer: NodeJS.Timeout | undefined;
  private readonly running = new Set<Promise<void>>();

  constructor(
    private readonly store: IdempotencyStore,
    private readonly policy: EndpointPolicy,
    private readonly rate: number,
  ) {}

  start(): void {
    let last = performance.now();
    let owed = 0;
    this.timer = setInterval(() => {
      const now = performance.now();
      owed += ((now - last) / 1000) * this.rate;
      last = now;
      while (owed >= 1) {
        owed -= 1;
        if (this.inFlight >= MAX_IN_FLIGHT) {
          this.dropped += 1;
          continue;
        }
        const done = this.one().finally(() => this.running.delete(done));
        this.running.add(done);
      }
    }, 10);
  }

  private async one(): Promise<void> {
    this.inFlight += 1;
    const startedAt = performance.now();
    let failed = false;
    try {
      const u = Math.random();
      const call: IdempotentCall = {
        principalId: principalOf(SEED, Math.floor(PRINCIPALS * u * u)),
        endpoint: PAYMENTS_SCOPE,
        method: 'POST',
        key: `order-${randomUUID()}`,
        body: { amount: 100 + Math.floor(Math.random() * 250_000), currency: 'EUR' },
        policy: this.policy,
        mode: 'claim-first',
        work: () => Promise.resolve({ status: 201, contentType: 'application/json', body: NEW_KEY_RESPONSE }),
      };
      const outcome = await this.store.execute(call);
      if (outcome.replayed) throw new Error('a new key was replayed');
    } catch (error) {
      failed = true;
      const message = error instanceof Error ? `${error.name}: ${error.message}`.slice(0, 200) : String(error);
      this.errors.set(message, (this.errors.get(message) ?? 0) + 1);
    } finally {
      this.inFlight -= 1;
      this.claims.push({ startedAt, ms: performance.now() - startedAt, failed });
    }
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await Promise.all([...this.running]);
  }

  between(from: number, to: number): Claim[] {
    return this.claims.filter((claim) => claim.startedAt >= from && claim.startedAt < to);
  }
}

/** The standby's replay lag seen from the primary, sampled every LAG_SAMPLE_MS. */
class LagSampler {
  /** Each sample also counts the primary's active client backends by wait event ('CPU' for none): what the claims waited on. */
  readonly samples: { at: number; bytes: number; seconds: number; waits: Record<string, number> }[] = [];
  private stopped = false;
  private loop: Promise<void> | undefined;

  constructor(private readonly url: string) {}

  start(): void {
    this.loop = (async () => {
      const client = new pg.Client({ connectionString: this.url });
      await client.connect();
      try {
        while (!this.stopped) {
          const { rows } = await client.query<{ bytes: string | null; seconds: number | null }>(
            `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) AS bytes, extract(epoch FROM replay_lag)::float8 AS seconds
               FROM pg_stat_replication ORDER BY replay_lsn LIMIT 1`,
          );
          const { rows: waiting } = await client.query<{ event: string; backends: number }>(
            `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') AS event, count(*)::int AS backends
               FROM pg_stat_activity
              WHERE state = 'active' AND backend_type = 'client backend' AND pid <> pg_backend_pid()
              GROUP BY 1`,
          );
          const row = rows[0];
          this.samples.push({
            at: performance.now(),
            bytes: Number(row?.bytes ?? Number.NaN),
            seconds: row?.seconds ?? 0,
            waits: Object.fromEntries(waiting.map((wait) => [wait.event, wait.backends])),
          });
          await sleep(LAG_SAMPLE_MS);
        }
      } finally {
        await client.end();
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
  }

  max(from: number, to: number): { bytes: number; seconds: number } {
    const window = this.samples.filter((sample) => sample.at >= from && sample.at <= to);
    return {
      bytes: largest(window.map((sample) => (Number.isFinite(sample.bytes) ? sample.bytes : 0))),
      seconds: largest(window.map((sample) => sample.seconds)),
    };
  }

  latest(): number {
    return this.samples.at(-1)?.bytes ?? Number.NaN;
  }

  /** Backend-samples per wait event over a window, the most frequent first. */
  waits(from: number, to: number): Record<string, number> {
    const totals = new Map<string, number>();
    for (const sample of this.samples) {
      if (sample.at < from || sample.at > to) continue;
      for (const [event, backends] of Object.entries(sample.waits)) totals.set(event, (totals.get(event) ?? 0) + backends);
    }
    return Object.fromEntries([...totals].sort((a, b) => b[1] - a[1]));
  }
}

const mb = (bytes: number) => `${(bytes / 1024 ** 2).toFixed(1)} MB`;

/** Yesterday's day partition (UTC), made as retrysafe_ensure_partitions names them; the backlog's expiries fall in it. */
async function yesterdaysPartition(owner: pg.Pool): Promise<void> {
  await owner.query(`DO $$
    DECLARE day timestamptz := date_trunc('day', now(), 'UTC') - interval '1 day';
            name text := 'idempotency_keys_p' || to_char(day AT TIME ZONE 'UTC', 'YYYYMMDD');
    BEGIN
      IF to_regclass('retrysafe.' || name) IS NULL THEN
        EXECUTE format('CREATE TABLE retrysafe.%I PARTITION OF retrysafe.idempotency_keys FOR VALUES FROM (%L) TO (%L)', name, day, day + interval '1 day');
      END IF;
    END $$`);
}

async function benchLayout(replica: StreamingReplica, layout: Layout, report: CleanupReport, save: () => Promise<void>, log: (line: string) => void): Promise<void> {
  const name = `retrysafe_cleanup_${layout}`;
  const url = new URL(await createLayoutDatabase(replica.primaryAdminUrl, name, layout));
  const owner = new pg.Pool({ connectionString: url.toString(), max: 6 });
  owner.on('error', () => undefined);
  const pool = new pg.Pool({ connectionString: url.toString(), max: 16, ...STORE_POOL_SETTINGS });
  pool.on('error', () => undefined);
  const policy: EndpointPolicy = {
    scopeMode: 'endpoint',
    retryWindowMs: RETENTION_SECONDS * 1000,
    retentionMs: RETENTION_SECONDS * 1000,
    leaseMs: 30_000,
    lockTimeoutMs: 5_000,
    maxResponseBytes: 4_096,
    liveKeyQuota: 1_000_000_000,
  };
  const quota = new LiveKeyQuota(owner, { service: SCALE_SERVICE });
  quota.start();
  const lag = new LagSampler(replica.primaryAdminUrl);
  lag.start();
  try {
    await registerScalePolicies(owner, policy);
    await owner.query('SELECT retrysafe.retrysafe_ensure_partitions()');
    const { file, secrets } = await writeLoaderSecrets(await replicaDir(owner));
    const keyRing = new ResponseKeyRing([{ id: secrets.keyId, key: Buffer.from(secrets.key, 'hex') }]);
    const store = new IdempotencyStore({ pool, service: SCALE_SERVICE, fingerprintSecret: Buffer.from(secrets.fingerprintSecret, 'hex'), keyRing, quota, observer: ignoreFlow, layout });

    if (STEADY_NAMES.includes(layout)) {
      const steady = await steadyState(owner, store, policy, layout, lag, log);
      report.steady.push(steady);
      await save();
      // The steady state's keys would expire while the cleanups run and be counted as theirs.
      await owner.query('TRUNCATE retrysafe.idempotency_keys');
    }
    // The traffic beside the cleanups keeps its keys for a day: none of them expires during a cleanup.
    const trafficPolicy: EndpointPolicy = { ...policy, retryWindowMs: 86_400_000, retentionMs: 86_400_000 };

    const methods: CleanupRun['method'][] = [layout === 'plain' ? 'sweeper' : 'partition-drop', 'unbounded-delete'];
    for (const method of methods) {
      // The backlog: yesterday's keys (expiries in one hour of yesterday, its first), every one past its expiry.
      if (layout === 'partitioned') await yesterdaysPartition(owner);
      const dayStart = new Date();
      dayStart.setUTCHours(0, 0, 0, 0);
      log(`\n${layout}, ${method}: loading ${BACKLOG.toLocaleString('en')} expired keys...`);
      const load = await loadScaleRows(owner, {
        batch: { seed: SEED, principals: PRINCIPALS, from: 0, count: BACKLOG, windowStartMs: dayStart.getTime() - 86_400_000 + 3_600_000, windowMs: 3_600_000, retentionMs: policy.retentionMs, leaseMs: policy.leaseMs },
        secretsFile: file,
        streams: 2,
        indexWorkers: 1,
      });
      log(`  loaded in ${load.totalSeconds.toFixed(0)} s; waiting for the standby, then a checkpoint (both methods start with the same full-page writes ahead)`);
      await replica.waitForReplay(600_000);
      await owner.query('CHECKPOINT');
      await replica.waitForReplay(600_000);
      const run = await measureCleanup(owner, store, trafficPolicy, lag, replica, layout, method, log);
      report.cleanups.push(run);
      await save();
    }
  } finally {
    await lag.stop();
    await quota.stop();
    await pool.end();
    await owner.end();
  }
  await dropDatabase(replica.primaryAdminUrl, name);
}

/** A folder the server's OS user reads files in: its data directory's parent. */
async function replicaDir(owner: pg.Pool): Promise<string> {
  const { rows } = await owner.query<{ setting: string }>("SELECT setting FROM pg_settings WHERE name = 'data_directory'");
  const dataDirectory = rows[0]?.setting;
  if (!dataDirectory) throw new Error('no data_directory');
  return join(dataDirectory, '..');
}

async function steadyState(owner: pg.Pool, store: IdempotencyStore, policy: EndpointPolicy, layout: Layout, lag: LagSampler, log: (line: string) => void): Promise<SteadyState> {
  const seconds = RETENTION_SECONDS * WINDOWS;
  log(`\n${layout}: steady state, ${RATE} new keys/s, retention ${RETENTION_SECONDS} s, sweeper every ${SWEEP_SECONDS} s, for ${WINDOWS} windows (${seconds} s)`);
  const sweeps: SteadyState['sweeps'] = [];
  const sweeper = new Sweeper(owner, SWEEP_SECONDS * 1000, {}, (result: SweepResult) => {
    sweeps.push({ rowsDeleted: result.rowsDeleted, chunks: result.chunks, longestChunkMs: result.longestChunkMs, partitionsDropped: result.partitionsDropped.length });
  }, (error) => log(`  sweep failed: ${error instanceof Error ? error.message : String(error)}`));
  const traffic = new Traffic(store, policy, RATE);
  const began = performance.now();
  traffic.start();
  sweeper.start();
  const samples: SteadySample[] = [];
  try {
    while (performance.now() - began < seconds * 1000) {
      await sleep(SAMPLE_MS);
      const { rows } = await owner.query<{ rows: string; expired: string; oldest: number | null }>(
        `SELECT count(*) AS rows, count(*) FILTER (WHERE expires_at < now()) AS expired,
                extract(epoch FROM now() - min(created_at))::float8 AS oldest
           FROM retrysafe.idempotency_keys`,
      );
      const row = rows[0];
      const sample: SteadySample = {
        atSeconds: (performance.now() - began) / 1000,
        rows: Number(row?.rows ?? 0),
        expiredRows: Number(row?.expired ?? 0),
        oldestAgeSeconds: row?.oldest ?? 0,
        lagBytes: lag.latest(),
      };
      samples.push(sample);
      if (samples.length % 12 === 0) {
        log(`  ${sample.atSeconds.toFixed(0)} s: ${sample.rows.toLocaleString('en')} rows (${sample.expiredRows.toLocaleString('en')} past expiry), oldest ${sample.oldestAgeSeconds.toFixed(0)} s, replica ${mb(sample.lagBytes)} behind`);
      }
    }
  } finally {
    await sweeper.stop();
    await traffic.stop();
  }
  const elapsed = (performance.now() - began) / 1000;
  const last = samples.filter((sample) => sample.atSeconds >= seconds - RETENTION_SECONDS);
  const achievedRate = traffic.claims.filter((claim) => !claim.failed).length / elapsed;
  const expectedRows = achievedRate * RETENTION_SECONDS;
  const maxRows = Math.max(...last.map((sample) => sample.rows));
  const minRows = Math.min(...last.map((sample) => sample.rows));
  const maxOldestAgeSeconds = Math.max(...last.map((sample) => sample.oldestAgeSeconds));
  const times = traffic.claims.filter((claim) => !claim.failed).map((claim) => claim.ms);
  const result: SteadyState = {
    layout,
    rate: RATE,
    achievedRate,
    retentionSeconds: RETENTION_SECONDS,
    sweepSeconds: SWEEP_SECONDS,
    windows: WINDOWS,
    samples,
    maxRows,
    minRows,
    expectedRows,
    maxOldestAgeSeconds,
    rowsWithin10Percent: maxRows <= expectedRows * 1.1 && minRows >= expectedRows * 0.9,
    oldestWithinRetentionPlusSweep: maxOldestAgeSeconds <= RETENTION_SECONDS + SWEEP_SECONDS,
    sweeps,
    claimP99Ms: percentileOf(times, 99),
    claimMaxMs: largest(times),
    failedClaims: traffic.claims.filter((claim) => claim.failed).length,
    errors: Object.fromEntries(traffic.errors),
    droppedClaims: traffic.dropped,
  };
  log(
    `  last window: rows ${minRows.toLocaleString('en')}-${maxRows.toLocaleString('en')} against rate x retention ${Math.round(expectedRows).toLocaleString('en')} (${achievedRate.toFixed(0)}/s achieved): ${result.rowsWithin10Percent ? 'within' : 'NOT within'} 10 %; oldest row ${maxOldestAgeSeconds.toFixed(0)} s against retention + sweep interval ${RETENTION_SECONDS + SWEEP_SECONDS} s: ${result.oldestWithinRetentionPlusSweep ? 'within' : 'NOT within'}`,
  );
  log(`  ${sweeps.length} sweeps, up to ${largest(sweeps.map((sweep) => sweep.rowsDeleted)).toLocaleString('en')} rows each, longest chunk ${largest(sweeps.map((sweep) => sweep.longestChunkMs)).toFixed(0)} ms; claims p99 ${result.claimP99Ms.toFixed(1)} ms, max ${result.claimMaxMs.toFixed(0)} ms, ${result.failedClaims} failed, ${result.droppedClaims} not started (${MAX_IN_FLIGHT} already in flight)`);
  for (const [message, count] of traffic.errors) log(`    failed ${count} times: ${message}`);
  return result;
}

async function measureCleanup(
  owner: pg.Pool,
  store: IdempotencyStore,
  policy: EndpointPolicy,
  lag: LagSampler,
  replica: StreamingReplica,
  layout: Layout,
  method: CleanupRun['method'],
  log: (line: string) => void,
): Promise<CleanupRun> {
  const traffic = new Traffic(store, policy, RATE);
  traffic.start();
  try {
    await sleep(2_000); // the pool's connections open and the claims settle
    const baselineFrom = performance.now();
    const baselineWal = await walPosition(owner);
    await sleep(BASELINE_MS);
    const baselineTo = performance.now();
    const walAtStart = await walPosition(owner);
    const baselineWalBytesPerSecond = (walAtStart - baselineWal) / ((baselineTo - baselineFrom) / 1000);
    const baseline = traffic.between(baselineFrom, baselineTo).filter((claim) => !claim.failed).map((claim) => claim.ms);

    const began = performance.now();
    let rowsRemoved = 0;
    if (method === 'unbounded-delete') {
      const result = await owner.query('DELETE FROM retrysafe.idempotency_keys WHERE expires_at < now()');
      rowsRemoved = result.rowCount ?? 0;
    } else {
      // The product's sweeper, run after run until the backlog is gone (a run stops at its row
      // budget; a sweeper that is behind runs again on its next interval: here at once).
      for (;;) {
        const result = await sweepOnce(owner, 'manual');
        if (result.status !== 'completed') throw new Error(`the sweep ${result.status}: ${result.error ?? result.stopReason}`);
        rowsRemoved += result.rowsDeleted;
        if (result.stopReason === 'caught-up') break;
      }
    }
    const ended = performance.now();
    const walAtEnd = await walPosition(owner);
    await replica.waitForReplay(600_000);
    const caughtUp = performance.now();
    const seconds = (ended - began) / 1000;
    const walBytes = Math.max(0, walAtEnd - walAtStart - baselineWalBytesPerSecond * seconds);
    const during = traffic.between(began, ended);
    const times = during.filter((claim) => !claim.failed).map((claim) => claim.ms);
    const lagMax = lag.max(began, caughtUp);
    const run: CleanupRun = {
      layout,
      method,
      rowsRemoved,
      seconds,
      walBytes,
      walBytesPerRow: walBytes / Math.max(1, rowsRemoved),
      baselineWalBytesPerSecond,
      baselineClaimP99Ms: percentileOf(baseline, 99),
      baselineClaimMaxMs: largest(baseline),
      claimsDuring: during.length,
      claimP99MsDuring: percentileOf(times, 99),
      longestClaimMsDuring: largest(times),
      failedClaimsDuring: during.filter((claim) => claim.failed).length,
      errors: Object.fromEntries(traffic.errors),
      droppedClaims: traffic.dropped,
      waitsDuring: lag.waits(began, ended),
      maxReplayLagBytes: lagMax.bytes,
      maxReplayLagSeconds: lagMax.seconds,
      catchUpSeconds: (caughtUp - ended) / 1000,
    };
    log(
      `  ${method}: ${rowsRemoved.toLocaleString('en')} rows in ${seconds.toFixed(1)} s; WAL ${mb(walBytes)} beyond the traffic's (${run.walBytesPerRow.toFixed(0)} B a row; traffic alone ${mb(baselineWalBytesPerSecond)}/s)`,
    );
    log(
      `    claims during: ${run.claimsDuring}, p99 ${run.claimP99MsDuring.toFixed(1)} ms, longest ${run.longestClaimMsDuring.toFixed(0)} ms (before: p99 ${run.baselineClaimP99Ms.toFixed(1)} ms, longest ${run.baselineClaimMaxMs.toFixed(0)} ms), ${run.failedClaimsDuring} failed; ${run.droppedClaims} not started in the whole run`,
    );
    for (const [message, count] of traffic.errors) log(`    failed ${count} times: ${message}`);
    log(`    backends waiting, summed over the samples during it: ${Object.entries(run.waitsDuring).slice(0, 6).map(([event, count]) => `${event} ${count}`).join(', ') || 'none sampled'}`);
    log(`    replica: replay lag up to ${mb(run.maxReplayLagBytes)} / ${run.maxReplayLagSeconds.toFixed(2)} s; caught up ${run.catchUpSeconds.toFixed(1)} s after the cleanup ended`);
    return run;
  } finally {
    await traffic.stop();
  }
}

export async function benchCleanup(log: (line: string) => void): Promise<CleanupReport> {
  const layouts = LAYOUT_NAMES.filter(isLayout);
  if (layouts.length !== LAYOUT_NAMES.length || !STEADY_NAMES.every(isLayout)) throw new Error(`BENCH_CLEANUP_LAYOUTS and BENCH_CLEANUP_STEADY_LAYOUTS: plain, partitioned (not ${[...LAYOUT_NAMES, ...STEADY_NAMES].join(', ')})`);
  for (const [name, value] of Object.entries({ RATE, RETENTION_SECONDS, WINDOWS, SWEEP_SECONDS, BACKLOG })) {
    if (!Number.isFinite(value) || value <= 0) throw new Error(`BENCH_CLEANUP_${name}: a positive number (not ${value})`);
  }
  const binaries = findReplicaBinaries();
  if ('missing' in binaries) throw new Error(`the cleanup bench needs a streaming replica: ${binaries.missing}`);
  // fsync on (the helper's tests run without): WAL is what this bench measures.
  const replica = await startStreamingReplica(binaries, { settings: { fsync: 'on', shared_buffers: '512MB', max_wal_size: '4GB', checkpoint_timeout: '15min' } });
  const report: CleanupReport = { at: new Date().toISOString(), postgres: '?', rate: RATE, backlog: BACKLOG, steady: [], cleanups: [] };
  const save = async () => {
    await mkdir(join('artifacts', 'bench'), { recursive: true });
    await writeFile(join('artifacts', 'bench', 'cleanup.json'), JSON.stringify(report, null, 2));
  };
  try {
    const admin = new pg.Client({ connectionString: replica.primaryAdminUrl });
    await admin.connect();
    report.postgres = (await admin.query<{ server_version: string }>('SHOW server_version')).rows[0]?.server_version ?? '?';
    await admin.end();
    log(`PostgreSQL ${report.postgres}: a primary and a streaming hot standby (ports ${replica.primaryPort}, ${replica.replicaPort}); layouts ${layouts.join(', ')}`);
    for (const layout of layouts) await benchLayout(replica, layout, report, save, log);
    log(`\nwritten to ${join('artifacts', 'bench', 'cleanup.json')}`);
    return report;
  } finally {
    await replica.stop();
  }
}
