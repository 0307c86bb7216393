// Keeps the flow metrics bounded: minute buckets older than the minute retention move into
// hour buckets (added, so several runs or instances never double count: the move deletes
// what it adds), and hour buckets older than the hour retention are deleted. One instance
// at a time (a transaction-scoped advisory lock); each table pair in one transaction. The
// principals' hours and days, which the flush writes, are merged down to top-K and expired.
import type pg from 'pg';
import { PRINCIPAL_TOP_K } from '@retrysafe/store';
import { inTransaction } from '../../db/transaction';
import { FLOW_SERIES_EVERY_ROW, LATENCY_SERIES_EVERY_ROW, PRINCIPAL_TIME_INDEX_PREDICATE } from '@retrysafe/store/index-predicates';

/** pg_advisory_xact_lock key: the bytes of "rsroll" as an integer. */
const ROLLUP_LOCK_KEY = 0x7273726f6c6cn;
/** The principals' merges' (one transaction per table): the bytes of "rstopk". */
const PRINCIPAL_MERGE_LOCK_KEY = 0x7273746f706bn;

export interface RollupOptions {
  minuteRetentionMs: number;
  hourRetentionMs: number;
  /** How long the principals' minute rows are kept (default 2 h). */
  principalMinuteRetentionMs?: number;
  /** Counters kept per (hour or day, service, scope, outcome) of the principals (default PRINCIPAL_TOP_K). */
  principalTopK?: number;
  /** How long the principals' hour rows are kept (default 26 h); their days as long as the hour buckets (hourRetentionMs). */
  principalHourRetentionMs?: number;
}

/** The principals' hour rows serve ranges up to 24 hours; longer ones read days. */
export const PRINCIPAL_HOUR_RETENTION_MS = 26 * 3_600_000;

/** The principals' minute rows serve the 1-hour range. */
export const PRINCIPAL_MINUTE_RETENTION_MS = 2 * 3_600_000;

export interface RollupResult {
  ran: boolean;
  minuteRowsRolledUp: number;
  hourRowsExpired: number;
  /** Rows of the overview's series past their retention. */
  seriesRowsExpired: number;
  /** The principals' minute, hour and day rows past their retention. */
  principalRowsExpired: number;
}

export async function rollUpFlowMetrics(pool: pg.Pool, options: RollupOptions): Promise<RollupResult> {
  const result = await inTransaction(pool, async (client) => {
    const { rows } = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_xact_lock($1) AS locked', [ROLLUP_LOCK_KEY.toString()]);
    if (!rows[0]?.locked) return { ran: false, minuteRowsRolledUp: 0, hourRowsExpired: 0, seriesRowsExpired: 0, principalRowsExpired: 0 };
    let minuteRowsRolledUp = 0;
    let hourRowsExpired = 0;
    let seriesRowsExpired = 0;
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
    for (const expiry of seriesExpiry(options)) {
      const expired = await client.query(expiry.text, expiry.values);
      seriesRowsExpired += expired.rowCount ?? 0;
    }
    // The store statistics series is kept as long as the hour buckets. Primary key range.
    for (const table of ['store_stats', 'store_stats_scopes'] as const) {
      const samples = await client.query(`DELETE FROM ${table} WHERE sampled_at < now() - $1::bigint * interval '1 millisecond'`, [options.hourRetentionMs]);
      hourRowsExpired += samples.rowCount ?? 0;
    }
    // The principals' minutes, hours and days past their retention (time index ranges).
    let principalRowsExpired = 0;
    for (const [table, column, retentionMs] of [
      ['principal_flow_minute', 'minute', options.principalMinuteRetentionMs ?? PRINCIPAL_MINUTE_RETENTION_MS],
      ['principal_flow_hour', 'hour', options.principalHourRetentionMs ?? PRINCIPAL_HOUR_RETENTION_MS],
      ['principal_flow_day', 'day', options.hourRetentionMs],
    ] as const) {
      const expired = await client.query(`DELETE FROM ${table} WHERE ${column} < now() - $1::bigint * interval '1 millisecond' AND ${PRINCIPAL_TIME_INDEX_PREDICATE}`, [retentionMs]);
      principalRowsExpired += expired.rowCount ?? 0;
    }
    return { ran: true, minuteRowsRolledUp, hourRowsExpired, seriesRowsExpired, principalRowsExpired };
  });
  if (result.ran) await mergeRecentPrincipals(pool, options.principalTopK ?? PRINCIPAL_TOP_K);
  return result;
}

/**
 * The overview's series (migration 0021) are complete at every step from the flush: they only
 * expire, the minute-like steps (1 h, 6 h and 24 h ranges) with the minute buckets, the hour and
 * 6-hour steps (7 d, 30 d) with the hour buckets. Each statement is a range of its partial time
 * index (the predicates here are the indexes' own).
 */
export function seriesExpiry(options: Pick<RollupOptions, 'minuteRetentionMs' | 'hourRetentionMs'>): { text: string; values: [number] }[] {
  // The partial time indexes' whole predicates (migration 0022): the column beside the step is
  // true of every row and stated by no reader, so only this statement can use them.
  return ([
    ['flow_counts_series', FLOW_SERIES_EVERY_ROW],
    ['claim_latency_series', LATENCY_SERIES_EVERY_ROW],
  ] as const).flatMap(([table, everyRow]) =>
    ([
      ['step < 3600', options.minuteRetentionMs],
      ['step >= 3600', options.hourRetentionMs],
    ] as const).map(([steps, retentionMs]) => ({
      text: `DELETE FROM ${table} WHERE ${steps} AND ${everyRow} AND at < now() - $1::bigint * interval '1 millisecond'`,
      values: [retentionMs] as [number],
    })),
  );
}

/** The principals' tables with a bucket the flush adds to and the roll-up merges: column, and how far back it merges. */
const PRINCIPAL_MERGED = [
  // Hours a flush may still add to: the current and the last few (a flush carried over an outage).
  { table: 'principal_flow_hour', column: 'hour', since: "date_bin('1 hour', now(), timestamptz 'epoch') - interval '3 hours'" },
  { table: 'principal_flow_day', column: 'day', since: "date_bin('1 day', now(), timestamptz 'epoch') - interval '1 day'" },
] as const;

/**
 * Merges each recent (bucket, service, scope, outcome) of the principals' hours or days that has
 * more than k counters down to k, the Misra-Gries way: the (k+1)-th largest count subtracted from
 * the k largest, the rest dropped. Each merge keeps every count within N/(k+1) of the truth (N the
 * bucket's events of that outcome), however often it runs as flushes add to the bucket, so the
 * tables stay bounded however many principals there are. The rows merged are locked first, in
 * primary-key order as a flush upserts them, so a flush adding to them meanwhile waits and is
 * counted whole, never lost to the merge. Served by the table's time index (its predicate
 * outcome > '' is true of every row and stated only by the roll-up); returns the rows dropped.
 */
export async function mergePrincipalsToTopK(client: Pick<pg.PoolClient, 'query'>, merged: (typeof PRINCIPAL_MERGED)[number], k: number): Promise<number> {
  const { table, column, since } = merged;
  const key = `t.service = r.service AND t.scope = r.scope AND t.${column} = r.at AND t.outcome = r.outcome AND t.principal_id = r.principal_id`;
  const { rows } = await client.query<{ dropped: string }>(
    `WITH over AS (
       SELECT service, scope, ${column} AS at, outcome FROM ${table}
       WHERE ${column} >= ${since} AND ${PRINCIPAL_TIME_INDEX_PREDICATE}
       GROUP BY 1, 2, 3, 4 HAVING count(*) > $1::int
     ), locked AS (
       SELECT t.service, t.scope, t.${column} AS at, t.outcome, t.principal_id, t.count
       FROM ${table} t JOIN over o ON t.service = o.service AND t.scope = o.scope AND t.${column} = o.at AND t.outcome = o.outcome
       ORDER BY 1, 2, 3, 4, 5 FOR UPDATE OF t
     ), ranked AS (
       SELECT *, row_number() OVER w AS rank,
              coalesce(nth_value(count, $1::int + 1) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING), 0) AS cut
       FROM locked WINDOW w AS (PARTITION BY service, scope, at, outcome ORDER BY count DESC, principal_id)
     ), dropped AS (
       DELETE FROM ${table} t USING ranked r WHERE ${key} AND (r.rank > $1::int OR r.count <= r.cut)
       RETURNING 1
     ), lowered AS (
       UPDATE ${table} t SET count = t.count - r.cut FROM ranked r WHERE ${key} AND r.rank <= $1::int AND r.count > r.cut AND r.cut > 0
       RETURNING 1
     )
     SELECT (SELECT count(*) FROM dropped) AS dropped, (SELECT count(*) FROM lowered) AS lowered`,
    [k],
  );
  return Number(rows[0]?.dropped ?? 0);
}

/**
 * The principals' recent hours and days merged down to top-K, each table in its own transaction
 * (so a merge holds one table's rows, locked in key order, and cannot deadlock with a flush).
 */
async function mergeRecentPrincipals(pool: pg.Pool, k: number): Promise<void> {
  for (const merged of PRINCIPAL_MERGED) {
    await inTransaction(pool, async (client) => {
      const { rows } = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_xact_lock($1) AS locked', [PRINCIPAL_MERGE_LOCK_KEY.toString()]);
      if (rows[0]?.locked) await mergePrincipalsToTopK(client, merged, k);
    });
  }
}
