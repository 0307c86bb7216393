// Keeps the flow metrics bounded: minute buckets older than the minute retention move into
// hour buckets (added, so several runs or instances never double count: the move deletes
// what it adds), and hour buckets older than the hour retention are deleted. One instance
// at a time (a transaction-scoped advisory lock); each table pair in one transaction.
import type pg from 'pg';
import { PRINCIPAL_TOP_K } from '@retrysafe/store';
import { inTransaction } from '../../db/transaction';
import { FLOW_SERIES_EVERY_ROW, LATENCY_SERIES_EVERY_ROW, PRINCIPAL_TIME_INDEX_PREDICATE } from '../../db/schema/metrics';

/** pg_advisory_xact_lock key: the bytes of "rsroll" as an integer. */
const ROLLUP_LOCK_KEY = 0x7273726f6c6cn;

export interface RollupOptions {
  minuteRetentionMs: number;
  hourRetentionMs: number;
  /** How long the principals' minute rows are kept before their whole hours move (default 2 h). */
  principalMinuteRetentionMs?: number;
  /** Counters kept per (hour, service, scope, outcome) of the principals (default PRINCIPAL_TOP_K). */
  principalTopK?: number;
  /** After how long the principals' hour rows merge into day rows (default 48 h). */
  principalHourRetentionMs?: number;
}

/** Past this, the principals' rows are days: a 30-day table reads about 30 + 48 + 120 buckets, not 720. */
export const PRINCIPAL_HOUR_RETENTION_MS = 48 * 3_600_000;

/** The principals' minute rows cover the 1-hour range; longer ones read hours. */
export const PRINCIPAL_MINUTE_RETENTION_MS = 2 * 3_600_000;

export interface RollupResult {
  ran: boolean;
  minuteRowsRolledUp: number;
  hourRowsExpired: number;
  /** Rows of the overview's series past their retention. */
  seriesRowsExpired: number;
}

export async function rollUpFlowMetrics(pool: pg.Pool, options: RollupOptions): Promise<RollupResult> {
  return inTransaction(pool, async (client) => {
    const { rows } = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_xact_lock($1) AS locked', [ROLLUP_LOCK_KEY.toString()]);
    if (!rows[0]?.locked) return { ran: false, minuteRowsRolledUp: 0, hourRowsExpired: 0, seriesRowsExpired: 0 };
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
    minuteRowsRolledUp += await rollUpPrincipals(client, options.principalMinuteRetentionMs ?? PRINCIPAL_MINUTE_RETENTION_MS, options.principalTopK ?? PRINCIPAL_TOP_K);
    await rollUpPrincipalDays(client, options.principalHourRetentionMs ?? PRINCIPAL_HOUR_RETENTION_MS, options.principalTopK ?? PRINCIPAL_TOP_K);
    // Hour index range (its predicate, outcome > '', is true of every row: migration 0022).
    const principalHours = await client.query(`DELETE FROM principal_flow_hour WHERE hour < now() - $1::bigint * interval '1 millisecond' AND ${PRINCIPAL_TIME_INDEX_PREDICATE}`, [options.hourRetentionMs]);
    hourRowsExpired += principalHours.rowCount ?? 0;
    // The store statistics series is kept as long as the hour buckets. Primary key range.
    for (const table of ['store_stats', 'store_stats_scopes'] as const) {
      const samples = await client.query(`DELETE FROM ${table} WHERE sampled_at < now() - $1::bigint * interval '1 millisecond'`, [options.hourRetentionMs]);
      hourRowsExpired += samples.rowCount ?? 0;
    }
    return { ran: true, minuteRowsRolledUp, hourRowsExpired, seriesRowsExpired };
  });
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

/**
 * Moves the principals' minute rows of whole hours older than the retention into hour rows,
 * each (hour, service, scope, outcome) merged down to k counters the Misra-Gries way: the
 * counts summed per principal, the (k+1)-th largest subtracted from the k largest, the rest
 * dropped. A merge keeps each count within N/(k+1) of the truth (N the hour's events of that
 * outcome), so the hour tables stay bounded however many principals there are. Served by the
 * minute index (the move; its predicate outcome > '' is true of every row and stated only here)
 * and the hour table's primary key (the upsert).
 */
async function rollUpPrincipals(client: Pick<pg.PoolClient, 'query'>, retentionMs: number, k: number): Promise<number> {
  const { rows } = await client.query<{ n: string }>(
    `WITH moved AS (
       DELETE FROM principal_flow_minute WHERE minute < date_trunc('hour', now() - $1::bigint * interval '1 millisecond') AND ${PRINCIPAL_TIME_INDEX_PREDICATE}
       RETURNING service, scope, minute, outcome, principal_id, count
     ), summed AS (
       SELECT service, scope, date_trunc('hour', minute) AS hour, outcome, principal_id, sum(count) AS count FROM moved GROUP BY 1, 2, 3, 4, 5
     ), ranked AS (
       SELECT *, row_number() OVER w AS rank,
              coalesce(nth_value(count, $2::int + 1) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING), 0) AS cut
       FROM summed WINDOW w AS (PARTITION BY service, scope, hour, outcome ORDER BY count DESC, principal_id)
     ), added AS (
       INSERT INTO principal_flow_hour (service, scope, hour, outcome, principal_id, count)
       SELECT service, scope, hour, outcome, principal_id, count - cut FROM ranked WHERE rank <= $2 AND count > cut
       ORDER BY 1, 2, 3, 4, 5
       ON CONFLICT (service, scope, hour, outcome, principal_id) DO UPDATE SET count = principal_flow_hour.count + EXCLUDED.count
     )
     SELECT count(*) AS n FROM moved`,
    [retentionMs, k],
  );
  return Number(rows[0]?.n ?? 0);
}

/**
 * Merges the principals' hour rows of whole days older than the retention into one row per
 * day (kept in principal_flow_hour at the day's first instant), down to k counters the same
 * way, so a long range reads days. Only the two days before the cut are looked at (the roll-up
 * runs every minute; hours a server down for longer left behind stay hours: correct, just more
 * rows); the hour index serves that range. The merged rows go through a temporary
 * table, inserted after their hours are deleted.
 */
async function rollUpPrincipalDays(client: Pick<pg.PoolClient, 'query'>, retentionMs: number, k: number): Promise<void> {
  await client.query('CREATE TEMP TABLE principal_days (service text, scope text, day timestamptz, outcome text, principal_id uuid, count bigint) ON COMMIT DROP');
  await client.query(
    `WITH days AS (
       SELECT DISTINCT service, scope, date_trunc('day', hour) AS day FROM principal_flow_hour
       WHERE hour < date_trunc('day', now() - $1::bigint * interval '1 millisecond')
         AND hour >= date_trunc('day', now() - $1::bigint * interval '1 millisecond') - interval '2 days'
         AND hour <> date_trunc('day', hour) AND ${PRINCIPAL_TIME_INDEX_PREDICATE}
     ), moved AS (
       DELETE FROM principal_flow_hour h USING days d
       WHERE h.service = d.service AND h.scope = d.scope AND h.hour >= d.day AND h.hour < d.day + interval '1 day'
       RETURNING h.service, h.scope, d.day, h.outcome, h.principal_id, h.count
     )
     INSERT INTO principal_days SELECT service, scope, day, outcome, principal_id, sum(count) FROM moved GROUP BY 1, 2, 3, 4, 5`,
    [retentionMs],
  );
  await client.query(
    `INSERT INTO principal_flow_hour (service, scope, hour, outcome, principal_id, count)
     SELECT service, scope, day, outcome, principal_id, count - cut FROM (
       SELECT *, row_number() OVER w AS rank,
              coalesce(nth_value(count, $1::int + 1) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING), 0) AS cut
       FROM principal_days WINDOW w AS (PARTITION BY service, scope, day, outcome ORDER BY count DESC, principal_id)
     ) ranked
     WHERE rank <= $1 AND count > cut
     ORDER BY 1, 2, 3, 4, 5`,
    [k],
  );
  await client.query('DROP TABLE principal_days');
}
