// The overview's pre-aggregated series (migration 0021) rebuilt from the per-scope minute and
// hour buckets: what the migration does for an existing install, for a database whose buckets
// were written without the series (a fixture, a bench load, or rows restored by hand). The flush
// keeps them current otherwise (packages/store/src/recorder.ts).
import { inTransaction, type Connectable } from '../../db/transaction';
import { SERIES_STEPS } from '@retrysafe/store';

const HOUR_STEPS = SERIES_STEPS.filter((step) => step >= 3_600);

/**
 * Replaces the series with the sums of the buckets: minutes at every step, hours at the hour and
 * 6-hour steps; each (service, scope), each service over its scopes ('*') and the store ('*', '*').
 */
export async function rebuildSeries(pool: Connectable): Promise<void> {
  // One transaction: a reader sees the old series or the new. A flush that commits in between
  // is in the minute rows the rebuild sums, so the upsert replaces its series rows with the sum.
  await inTransaction(pool, (db) => rebuildSeriesOn(db));
}

async function rebuildSeriesOn(db: { query(text: string, values?: unknown[]): Promise<unknown> }): Promise<void> {
  for (const [series, minutes, hours, key] of [
    ['flow_counts_series', 'flow_counts_minute', 'flow_counts_hour', 'outcome'],
    ['claim_latency_series', 'claim_latency_minute', 'claim_latency_hour', 'bucket'],
  ] as const) {
    await db.query(`DELETE FROM ${series}`);
    await db.query(
      `INSERT INTO ${series} (step, service, scope, at, ${key}, count)
       SELECT step, CASE WHEN grouping(service) = 1 THEN '*' ELSE service END, CASE WHEN grouping(scope) = 1 THEN '*' ELSE scope END, at, ${key}, sum(count)
       FROM (
         SELECT st.step, m.service, m.scope, date_bin(st.step * interval '1 second', m.minute, timestamptz 'epoch') AS at, m.${key}, m.count
         FROM ${minutes} m CROSS JOIN unnest($1::int[]) AS st(step)
         UNION ALL
         SELECT st.step, h.service, h.scope, date_bin(st.step * interval '1 second', h.hour, timestamptz 'epoch'), h.${key}, h.count
         FROM ${hours} h CROSS JOIN unnest($2::int[]) AS st(step)
       ) AS f
       GROUP BY step, at, ${key}, GROUPING SETS ((service, scope), (service), ())
       ON CONFLICT (step, service, scope, at, ${key}) DO UPDATE SET count = EXCLUDED.count`,
      [SERIES_STEPS, HOUR_STEPS],
    );
  }
}
