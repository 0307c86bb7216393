// What each live partition costs a claim (partitioned layout). The partitioned claim
// (retrysafe_claim_partitioned) probes every partition whose range is not yet past
// (expires_at > now()) before it inserts, so narrower partitions, which a short retention would
// need for its rows to leave on time, mean more probes a claim. This measures it: for a growing
// number of live partitions, each holding rows, 8 clients claim new keys for a while; the
// claims a second, p50 and p99, the buffers a claim touches, the relation locks one claim holds
// (and how many of them missed the backend's fast-path slots), and how often claiming backends
// were seen waiting on the lock manager.
import { randomBytes, randomUUID } from 'node:crypto';
import { newCorrelationId } from '@retrysafe/store';
import pg from 'pg';
import { partitionedStatements } from '@retrysafe/store/postgres';
import { listPartitions } from '../server/retention/partitions';
import type { BenchDatabase } from './database';
import { BENCH_SERVICE, loadCompletedKeys } from './fixtures';
import { formatRun, runClosedLoop, type RunResult } from './measure';

const CLIENTS = 8;
const COUNTS = (process.env.BENCH_PROBE_PARTITIONS ?? '2,4,8,16,32,64').split(',').map(Number);
const ROWS_PER_PARTITION = Number(process.env.BENCH_PROBE_ROWS ?? 20_000);
const SECONDS = Number(process.env.BENCH_PROBE_SECONDS ?? 8);
const DAY_MS = 86_400_000;

export interface PartitionProbeStep extends RunResult {
  livePartitions: number;
  /** Shared buffers hit or read per claim, server-wide over the window (claims alone run). */
  buffersPerClaim: number;
  /** Relation locks one claim's transaction holds, and of them those outside the fast-path slots. */
  relationLocks: number;
  slowPathLocks: number;
  /** Samples (every 20 ms) of a claiming backend waiting on LWLock:LockManager, per 1,000 samples of claiming backends. */
  lockManagerWaitsPerThousand: number;
}

export interface PartitionProbesReport {
  serverVersion: string;
  rowsPerPartition: number;
  steps: PartitionProbeStep[];
}

const partitionName = (index: number) => `idempotency_keys_probe_${String(index).padStart(3, '0')}`;

export async function benchPartitionProbes(database: BenchDatabase, log: (line: string) => void): Promise<PartitionProbesReport> {
  if (COUNTS.some((count) => !Number.isInteger(count) || count < 1 || count > 400)) throw new Error(`BENCH_PROBE_PARTITIONS must list whole numbers from 1 to 400, not ${process.env.BENCH_PROBE_PARTITIONS}`);
  const pool = new pg.Pool({ connectionString: database.url, max: CLIENTS + 2 });
  try {
    const { rows: version } = await pool.query<{ server_version: string }>('SHOW server_version');
    // The partitions the install made (today and the days ahead) go: these stand in for them, a
    // day wide each from an hour ago, so every one of them is live. Their width does not matter to
    // the probe, only their number; each holds rows, so each probe descends a real index.
    for (const { name } of await listPartitions(pool)) await pool.query(`DROP TABLE ${pg.escapeIdentifier(name)}`);
    const { rows: clock } = await pool.query<{ start: Date }>("SELECT date_trunc('second', now()) - interval '1 hour' AS start");
    const start = clock[0]?.start.getTime() ?? Date.now() - 3_600_000;
    const principals = Array.from({ length: CLIENTS }, () => randomUUID());
    const claimOn = (db: Pick<pg.ClientBase, 'query'>, worker: number, key: string) =>
      partitionedStatements.claim(db, {
        principalId: principals[worker] ?? '',
        service: BENCH_SERVICE,
        scope: 'POST /api/v1/payments',
        key,
        fingerprint: randomBytes(32),
        correlationId: newCorrelationId(),
        leaseMs: 30_000,
        // An hour: the new rows go to the first partition, as a day's go to today's.
        retentionMs: 3_600_000,
      });
    const steps: PartitionProbeStep[] = [];
    let made = 0;
    for (const count of [...COUNTS].sort((a, b) => a - b)) {
      for (; made < count; made += 1) {
        const from = new Date(start + made * DAY_MS);
        await pool.query(
          `CREATE TABLE ${partitionName(made)} PARTITION OF idempotency_keys FOR VALUES FROM ('${from.toISOString()}') TO ('${new Date(from.getTime() + DAY_MS).toISOString()}')`,
        );
        await loadCompletedKeys(pool, ROWS_PER_PARTITION, from);
      }
      await pool.query('VACUUM ANALYZE idempotency_keys');
      // One claim's locks, after enough claims on the connection for its plan to settle.
      const client = await pool.connect();
      let locks = { relation: 0, slow: 0 };
      try {
        for (let i = 0; i < 8; i += 1) await claimOn(client, 0, `locks-${count}-${i}-${randomUUID()}`);
        await client.query('BEGIN');
        await claimOn(client, 0, `locks-${count}-${randomUUID()}`);
        const { rows } = await client.query<{ relation: number; slow: number }>(
          "SELECT count(*)::int AS relation, count(*) FILTER (WHERE NOT fastpath)::int AS slow FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'relation'",
        );
        await client.query('ROLLBACK');
        locks = rows[0] ?? locks;
      } finally {
        client.release();
      }
      // Waits seen on the lock manager, sampled from another connection while the claims run.
      const sampler = new pg.Client({ connectionString: database.url });
      await sampler.connect();
      let sampling = false;
      let samples = 0;
      let lockManager = 0;
      let sampled: Promise<void> = Promise.resolve();
      const sample = async () => {
        while (sampling) {
          const { rows } = await sampler.query<{ wait: string | null }>(
            "SELECT wait_event_type || ':' || wait_event AS wait FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%retrysafe_claim_partitioned%' AND pid <> pg_backend_pid()",
          );
          samples += rows.length;
          lockManager += rows.filter((row) => row.wait === 'LWLock:LockManager').length;
          await new Promise((done) => setTimeout(done, 20));
        }
      };
      let buffersBefore = 0;
      let buffersAfter = 0;
      const buffers = async () => {
        const { rows } = await pool.query<{ touched: string }>('SELECT sum(blks_hit + blks_read)::text AS touched FROM pg_stat_database');
        return Number(rows[0]?.touched ?? 0);
      };
      try {
        buffersBefore = await buffers();
        const run = await runClosedLoop(
          CLIENTS,
          SECONDS * 1000,
          async (worker, iteration) => {
            await claimOn(pool, worker, `probe-${count}-${worker}-${iteration}-${randomUUID()}`);
          },
          2_000,
          (edge) => {
            if (edge === 'open') {
              sampling = true;
              sampled = sample();
            } else sampling = false;
          },
        );
        await sampled;
        buffersAfter = await buffers();
        // pg_stat_database is updated when a backend reports; the window's claims dominate either way.
        const step: PartitionProbeStep = {
          ...run,
          livePartitions: count,
          buffersPerClaim: (buffersAfter - buffersBefore) / run.operations,
          relationLocks: locks.relation,
          slowPathLocks: locks.slow,
          lockManagerWaitsPerThousand: samples === 0 ? 0 : (1000 * lockManager) / samples,
        };
        steps.push(step);
        log(
          `${formatRun(`  ${String(count).padStart(3)} live partitions`, run)}   ${step.buffersPerClaim.toFixed(1)} buffers/claim   locks ${step.relationLocks} (${step.slowPathLocks} slow-path)   lock-manager waits ${step.lockManagerWaitsPerThousand.toFixed(0)}/1000`,
        );
      } finally {
        await sampler.end();
      }
    }
    const first = steps[0];
    const last = steps.at(-1);
    if (first && last && first !== last) {
      log(`  ${last.livePartitions} live partitions against ${first.livePartitions}: ${(last.perSecond / first.perSecond).toFixed(2)}x the claims a second, p99 ${(last.p99Ms / first.p99Ms).toFixed(2)}x`);
    }
    return { serverVersion: version[0]?.server_version ?? '', rowsPerPartition: ROWS_PER_PARTITION, steps };
  } finally {
    await pool.end();
  }
}
