// Partition removal under live claims (partitioned layout): a 2-million-row day partition
// whose rows have all expired is detached CONCURRENTLY and dropped while 8 clients keep
// claiming new keys. Target: no claim waits on it for more than 50 ms.
import { randomBytes, randomUUID } from 'node:crypto';
import { newCorrelationId } from '@retrysafe/store';
import pg from 'pg';
import { partitionedStatements } from '@retrysafe/store/postgres';
import { dropExpiredPartitions } from '../server/retention/partitions';
import type { BenchDatabase } from './database';
import { BENCH_SERVICE, loadCompletedKeys } from './fixtures';
import { formatRun, runClosedLoop, runWhile, type RunResult } from './measure';

const ROWS = Number(process.env.BENCH_PARTITION_ROWS ?? 2_000_000);
const CLIENTS = 8;

export interface PartitionsReport {
  rows: number;
  baseline: RunResult & { maxMs: number };
  duringDrop: RunResult & { maxMs: number };
  detachMs: number;
  dropMs: number;
}

export async function benchPartitions(database: BenchDatabase, log: (line: string) => void): Promise<PartitionsReport> {
  const pool = new pg.Pool({ connectionString: database.url, max: CLIENTS + 2 });
  const { rows: days } = await pool.query<{ from: Date; to: Date }>(
    "SELECT date_trunc('day', now(), 'UTC') - interval '2 days' AS from, date_trunc('day', now(), 'UTC') - interval '1 day' AS to",
  );
  const day = days[0];
  if (!day) throw new Error('no clock');
  const name = `idempotency_keys_p${day.from.toISOString().slice(0, 10).replaceAll('-', '')}`;
  await pool.query(`CREATE TABLE ${name} PARTITION OF idempotency_keys FOR VALUES FROM ('${day.from.toISOString()}') TO ('${day.to.toISOString()}')`);
  log(`loading ${ROWS.toLocaleString('en')} expired rows into ${name}...`);
  const started = performance.now();
  await loadCompletedKeys(pool, ROWS, day.from);
  await pool.query(`VACUUM ANALYZE ${name}`);
  log(`  loaded in ${((performance.now() - started) / 1000).toFixed(1)} s`);

  const principals = Array.from({ length: CLIENTS }, () => randomUUID());
  const latencies: number[] = [];
  const claim = async (worker: number, i: number) => {
    const began = performance.now();
    await partitionedStatements.claim(pool, {
      principalId: principals[worker] ?? '',
      service: BENCH_SERVICE,
      scope: 'POST /api/v1/payments',
      key: `live-${worker}-${i}-${Math.random()}`,
      fingerprint: randomBytes(32),
      correlationId: newCorrelationId(),
      leaseMs: 30_000,
      retentionMs: 93_600_000,
    });
    latencies.push(performance.now() - began);
  };
  const maxOf = (from: number) => Math.max(...latencies.slice(from));

  const beforeBaseline = latencies.length;
  const baseline = await runClosedLoop(CLIENTS, 4_000, claim, 0);
  const baselineMax = maxOf(beforeBaseline);
  log(formatRun('  claims, before', baseline) + `   max ${baselineMax.toFixed(1)} ms`);

  const client = await pool.connect();
  const beforeDrop = latencies.length;
  const during = await runWhile(CLIENTS, async () => {
    await new Promise((done) => setTimeout(done, 500));
    const dropped = await dropExpiredPartitions(client);
    await new Promise((done) => setTimeout(done, 500));
    return dropped;
  }, claim);
  client.release();
  const duringMax = maxOf(beforeDrop);
  const partition = during.value.find((candidate) => candidate.name === name);
  if (!partition) throw new Error(`${name} was not dropped`);
  log(formatRun('  claims, around the drop', during.run) + `   max ${duringMax.toFixed(1)} ms`);
  log(`  DETACH CONCURRENTLY ${partition.detachMs.toFixed(0)} ms, DROP ${partition.dropMs.toFixed(0)} ms (${partition.rows.toLocaleString('en')} rows)`);
  log(`  claim p99 around the drop / before: ${(during.run.p99Ms / baseline.p99Ms).toFixed(2)}x`);
  log(`  longest claim around the drop: ${duringMax.toFixed(1)} ms, before it: ${baselineMax.toFixed(1)} ms (target: no claim waits more than 50 ms)`);
  await pool.end();
  return { rows: partition.rows, baseline: { ...baseline, maxMs: baselineMax }, duringDrop: { ...during.run, maxMs: duringMax }, detachMs: partition.detachMs, dropMs: partition.dropMs };
}
