// The lookup by correlation id on a store of BENCH_CORRELATION_ROWS keys (default 10 million):
// its time (median of 5) and plan, then what its index (idempotency_keys_correlation_idx)
// costs claims: 8 clients claiming new keys with the index and with it dropped, alternating.
import { randomUUID } from 'node:crypto';
import { PostgresKeyReads } from '@retrysafe/store/postgres';
import { createPool } from '../db/client';
import { explainPrepared, recordingQueryable, summarisePlan } from '../packages/store/test/helpers/plan';
import type { BenchDatabase } from './database';
import { loadCompletedKeys } from './fixtures';
import { benchIndexCost, CORRELATION_INDEX, type IndexCost } from './stats-queries';

const ROWS = Number(process.env.BENCH_CORRELATION_ROWS ?? 10_000_000);

export async function benchCorrelation(database: BenchDatabase, log: (line: string) => void): Promise<{ lookupMs: number; indexBytes: number; cost: IndexCost }> {
  const pool = createPool(database.url, { applicationName: 'retrysafe-bench', max: 4 });
  try {
    log(`loading ${ROWS.toLocaleString('en')} keys...`);
    const { rows: clock } = await pool.query<{ from: Date }>("SELECT now() - interval '2 hours' AS from");
    await loadCompletedKeys(pool, ROWS, clock[0]?.from ?? new Date());
    await pool.query('VACUUM ANALYZE idempotency_keys');
    const { rows: quoted } = await pool.query<{ correlation_id: string }>("SELECT correlation_id FROM idempotency_keys WHERE key = 'old-77' LIMIT 1");
    const correlationId = quoted[0]?.correlation_id ?? randomUUID();
    const times: number[] = [];
    for (let i = 0; i < 5; i += 1) {
      const started = performance.now();
      const records = await new PostgresKeyReads(pool).correlationRecords(correlationId);
      times.push(performance.now() - started);
      if (records.length !== 1) throw new Error(`expected one record, found ${records.length}`);
    }
    times.sort((a, b) => a - b);
    const lookupMs = times[2] ?? NaN;
    const recorded = recordingQueryable(pool);
    await new PostgresKeyReads(recorded.db).correlationRecords(correlationId);
    const client = await pool.connect();
    let plan = '';
    try {
      const statement = recorded.statements[0];
      if (statement) plan = summarisePlan(await explainPrepared(client, statement.text, statement.values, 'force_generic_plan'));
    } finally {
      client.release();
    }
    const { rows: size } = await pool.query<{ bytes: string }>(`SELECT pg_relation_size('${CORRELATION_INDEX.name}') AS bytes`);
    const indexBytes = Number(size[0]?.bytes ?? 0);
    log(`  lookup by correlation id       ${lookupMs.toFixed(2).padStart(8)} ms   ${plan}`);
    log(`  ${CORRELATION_INDEX.name}: ${(indexBytes / 2 ** 20).toFixed(0)} MiB, ${(indexBytes / ROWS).toFixed(1)} bytes a key`);
    const cost = await benchIndexCost(pool, database.url, log, CORRELATION_INDEX);
    return { lookupMs, indexBytes, cost };
  } finally {
    await pool.end();
  }
}
