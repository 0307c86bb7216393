// Keeps the flow metrics bounded: minute buckets older than the minute retention move into
// hour buckets (added, so several runs or instances never double count: the move deletes
// what it adds), and hour buckets older than the hour retention are deleted. One instance
// at a time (a transaction-scoped advisory lock); each table pair in one transaction.
import type pg from 'pg';
import { inTransaction } from '../../db/transaction';

/** pg_advisory_xact_lock key: the bytes of "rsroll" as an integer. */
const ROLLUP_LOCK_KEY = 0x7273726f6c6cn;

export interface RollupOptions {
  minuteRetentionMs: number;
  hourRetentionMs: number;
}

export interface RollupResult {
  ran: boolean;
  minuteRowsRolledUp: number;
  hourRowsExpired: number;
}

export async function rollUpFlowMetrics(pool: pg.Pool, options: RollupOptions): Promise<RollupResult> {
  return inTransaction(pool, async (client) => {
    const { rows } = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_xact_lock($1) AS locked', [ROLLUP_LOCK_KEY.toString()]);
    if (!rows[0]?.locked) return { ran: false, minuteRowsRolledUp: 0, hourRowsExpired: 0 };
    let minuteRowsRolledUp = 0;
    let hourRowsExpired = 0;
    for (const [minuteTable, hourTable, key] of [
      ['flow_counts_minute', 'flow_counts_hour', 'outcome'],
      ['claim_latency_minute', 'claim_latency_hour', 'bucket'],
    ] as const) {
      // Served by each table's primary key (prefix: the time column).
      const moved = await client.query<{ n: string }>(
        `WITH moved AS (
           DELETE FROM ${minuteTable} WHERE minute < now() - $1::bigint * interval '1 millisecond' RETURNING minute, service, scope, ${key}, count
         ), added AS (
           INSERT INTO ${hourTable} (hour, service, scope, ${key}, count)
           SELECT date_trunc('hour', minute), service, scope, ${key}, sum(count) FROM moved GROUP BY 1, 2, 3, 4
           ON CONFLICT (hour, service, scope, ${key}) DO UPDATE SET count = ${hourTable}.count + EXCLUDED.count
         )
         SELECT count(*) AS n FROM moved`,
        [options.minuteRetentionMs],
      );
      minuteRowsRolledUp += Number(moved.rows[0]?.n ?? 0);
      const expired = await client.query(`DELETE FROM ${hourTable} WHERE hour < now() - $1::bigint * interval '1 millisecond'`, [options.hourRetentionMs]);
      hourRowsExpired += expired.rowCount ?? 0;
    }
    // The store statistics series is kept as long as the hour buckets. Primary key range.
    for (const table of ['store_stats', 'store_stats_scopes'] as const) {
      const samples = await client.query(`DELETE FROM ${table} WHERE sampled_at < now() - $1::bigint * interval '1 millisecond'`, [options.hourRetentionMs]);
      hourRowsExpired += samples.rowCount ?? 0;
    }
    return { ran: true, minuteRowsRolledUp, hourRowsExpired };
  });
}
