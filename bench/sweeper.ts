// The sweeper against live traffic: 2 million expired rows, 8 clients claiming new keys
// throughout. Claim p99 without a sweep (baseline), during a paced sweep (target: at most
// 1.5x the baseline), and during the naive unbounded DELETE, for comparison.
import { randomBytes, randomUUID } from 'node:crypto';
import { newCorrelationId } from '@retrysafe/store';
import pg from 'pg';
import { storeStatementTexts } from '@retrysafe/store/postgres';
import { sweepOnce, defaultSweepOptions, type SweepResult } from '../server/retention/sweeper';
import type { BenchDatabase } from './database';
import { BENCH_SERVICE, loadCompletedKeys } from './fixtures';
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
  const { rows: clock } = await pool.query<{ from: Date }>("SELECT now() - interval '2 days' AS from");
  await loadCompletedKeys(pool, EXPIRED_ROWS, clock[0]?.from ?? new Date(Date.now() - 2 * 86_400_000));
  await pool.query('VACUUM ANALYZE idempotency_keys');
  log(`  loaded in ${((performance.now() - loadStarted) / 1000).toFixed(1)} s`);

  const principals = Array.from({ length: CLIENTS }, () => randomUUID());
  const run = randomUUID().slice(0, 8);
  const claim = async (worker: number, i: number) => {
    await pool.query({
      name: 'bench_sweep_claim',
      text: storeStatementTexts.claim,
      values: [principals[worker], 'POST /api/v1/payments', `live-${run}-${worker}-${i}-${Math.random()}`, randomBytes(32), newCorrelationId(), 30_000, 93_600_000, BENCH_SERVICE],
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
