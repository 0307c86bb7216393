// The overview's series tables rewritten in time order, as a live install holds them: the flush
// writes each minute's rows as it goes, while rebuildSeries (and so a fixture built with it)
// writes them in key order, which changes the planner's choices (the time indexes' correlation).
import type pg from 'pg';

export async function storeSeriesInTimeOrder(pool: pg.Pool): Promise<void> {
  for (const table of ['flow_counts_series', 'claim_latency_series']) {
    await pool.query(
      `CREATE TEMP TABLE in_time_order AS SELECT * FROM ${table} ORDER BY at, step, service, scope;
       TRUNCATE ${table}; INSERT INTO ${table} SELECT * FROM in_time_order; DROP TABLE in_time_order`,
    );
  }
}
