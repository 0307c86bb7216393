// The sweeper against live traffic: 2 million expired rows, 8 clients claiming new keys
// throughout. Claim p99 without a sweep (baseline), during a paced sweep (target: at most
// 1.5x the baseline), and during the naive unbounded DELETE, for comparison.
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { storeStatementTexts } from '../server/idempotency/statements';
import { sweepOnce, defaultSweepOptions, type SweepResult } from '../server/retention/sweeper';
import type { BenchDatabase } from './database';
import { formatRun, runClosedLoop, runWhile, type RunResult } from './measure';

const EXPIRED_ROWS = Number(process.env.BENCH_SWEEP_ROWS ?? 2_000_000);
const SWEEP_BUDGET = Number(process.env.BENCH_SWEEP_BUDGET ?? 400_000);
const CLIENTS = 8;

export interface SweeperReport {
  expiredRows: number;
  baseline: RunResult;
  duringSweep: RunResult;
  sweep: Pick<SweepResult, 'rowsDeleted' | 'chunks' | 'longestChunkMs'> & { seconds: number; rowsPerSecond: number };
  duringNaive: RunResult;
  naive: { rowsDeleted: number; seconds: number };
  sweepP99Ratio: number;
  naiveP99Ratio: number;
}

export async function benchSweeper(database: BenchDatabase, log: (line: string) => void): Promise<SweeperReport> {
  const pool = new pg.Pool({ connectionString: database.url, max: CLIENTS + 4 });
  log(`loading ${EXPIRED_ROWS.toLocaleString('en')} expired rows...`);
  const loadStarted = performance.now();
  for (let offset = 0; offset < EXPIRED_ROWS; offset += 250_000) {
    await pool.query(
      `INSERT INTO idempotency_keys (principal_id, scope, key, state, fingerprint, correlation_id, response_status, response_content_type,
         response_body, response_key_id, response_size, completed_at, created_at, expires_at)
       SELECT ('00000000-0000-0000-0000-' || lpad((i % 5000)::text, 12, '0'))::uuid, 'POST /api/v1/payments', 'old-' || i, 'completed',
              sha256(i::text::bytea), gen_random_uuid(), 201, 'application/json', convert_to(repeat('x', 120), 'UTF8'), 'k1', 120,
              now() - interval '3 days', now() - interval '3 days', now() - interval '1 day' + (i % 86400) * interval '1 second'
       FROM generate_series($1::int + 1, $1::int + least(250000, $2::int - $1::int)) AS i`,
      [offset, EXPIRED_ROWS],
    );
  }
  await pool.query('VACUUM ANALYZE idempotency_keys');
  log(`  loaded in ${((performance.now() - loadStarted) / 1000).toFixed(1)} s`);

  const principals = Array.from({ length: CLIENTS }, () => randomUUID());
  const run = randomUUID().slice(0, 8);
  const claim = async (worker: number, i: number) => {
    await pool.query({
      name: 'bench_sweep_claim',
      text: storeStatementTexts.claim,
      values: [principals[worker], 'POST /api/v1/payments', `live-${run}-${worker}-${i}-${Math.random()}`, randomBytes(32), randomUUID(), 30_000, 93_600_000],
    });
  };

  const baseline = await runClosedLoop(CLIENTS, 5_000, claim);
  log(formatRun('  claims, no sweep', baseline));

  const sweepStarted = performance.now();
  const during = await runWhile(CLIENTS, () => sweepOnce(pool, 'manual', { maxRowsPerRun: SWEEP_BUDGET }), claim);
  const sweepSeconds = (performance.now() - sweepStarted) / 1000;
  const sweep = {
    rowsDeleted: during.value.rowsDeleted,
    chunks: during.value.chunks,
    longestChunkMs: during.value.longestChunkMs,
    seconds: sweepSeconds,
    rowsPerSecond: during.value.rowsDeleted / sweepSeconds,
  };
  log(formatRun('  claims, during the paced sweep', during.run));
  log(
    `  sweep: ${sweep.rowsDeleted.toLocaleString('en')} rows in ${sweep.chunks} chunks of ${defaultSweepOptions.chunkSize}, ` +
      `${sweep.rowsPerSecond.toFixed(0)} rows/s, longest chunk ${sweep.longestChunkMs.toFixed(1)} ms`,
  );

  const naiveStarted = performance.now();
  const naive = await runWhile(CLIENTS, async () => (await pool.query('DELETE FROM idempotency_keys WHERE expires_at < now()')).rowCount ?? 0, claim);
  const naiveSeconds = (performance.now() - naiveStarted) / 1000;
  log(formatRun('  claims, during one unbounded DELETE', naive.run));
  log(`  unbounded DELETE: ${naive.value.toLocaleString('en')} rows in ${naiveSeconds.toFixed(1)} s, one transaction`);
  await pool.end();

  const report: SweeperReport = {
    expiredRows: EXPIRED_ROWS,
    baseline,
    duringSweep: during.run,
    sweep,
    duringNaive: naive.run,
    naive: { rowsDeleted: naive.value, seconds: naiveSeconds },
    sweepP99Ratio: during.run.p99Ms / baseline.p99Ms,
    naiveP99Ratio: naive.run.p99Ms / baseline.p99Ms,
  };
  log(`  claim p99 during the sweep / without: ${report.sweepP99Ratio.toFixed(2)}x (target <= 1.50x)`);
  log(`  claim p99 during the unbounded DELETE / without: ${report.naiveP99Ratio.toFixed(2)}x (for comparison)`);
  return report;
}
