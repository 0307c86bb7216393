// Flow metrics, cluster-wide: every instance adds its counts to the same buckets, so the
// stored figures are the sum over instances. Minute buckets roll up into hour buckets and
// then expire (server/metrics/rollup.ts).
import { sql } from 'drizzle-orm';
import { bigint, check, doublePrecision, index, integer, primaryKey, smallint, text, timestamp, uuid } from 'drizzle-orm/pg-core';
import { FLOW_SERIES_EVERY_ROW, LATENCY_SERIES_EVERY_ROW, PRINCIPAL_TIME_INDEX_PREDICATE } from '../index-predicates.js';
import { retrysafe } from './schema.js';

const outcomeCheck = (column: unknown) =>
  sql`${column} IN ('new', 'replay', 'conflict', 'mismatch', 'takeover', 'rejected', 'error')`;

export const flowCountsMinute = retrysafe.table(
  'flow_counts_minute',
  {
    minute: timestamp('minute', { withTimezone: true }).notNull(),
    service: text('service').notNull(),
    scope: text('scope').notNull(),
    outcome: text('outcome').notNull(),
    count: bigint('count', { mode: 'number' }).notNull(),
  },
  // Serves the flush upsert and every time-range query (prefix: minute).
  (t) => [primaryKey({ name: 'flow_counts_minute_pkey', columns: [t.minute, t.service, t.scope, t.outcome] }), check('flow_counts_minute_outcome', outcomeCheck(t.outcome))],
);

export const flowCountsHour = retrysafe.table(
  'flow_counts_hour',
  {
    hour: timestamp('hour', { withTimezone: true }).notNull(),
    service: text('service').notNull(),
    scope: text('scope').notNull(),
    outcome: text('outcome').notNull(),
    count: bigint('count', { mode: 'number' }).notNull(),
  },
  (t) => [primaryKey({ name: 'flow_counts_hour_pkey', columns: [t.hour, t.service, t.scope, t.outcome] }), check('flow_counts_hour_outcome', outcomeCheck(t.outcome))],
);

export const claimLatencyMinute = retrysafe.table(
  'claim_latency_minute',
  {
    minute: timestamp('minute', { withTimezone: true }).notNull(),
    service: text('service').notNull(),
    scope: text('scope').notNull(),
    // Index into the fixed log-spaced bucket bounds (server/metrics/histogram.ts).
    bucket: smallint('bucket').notNull(),
    count: bigint('count', { mode: 'number' }).notNull(),
  },
  (t) => [primaryKey({ name: 'claim_latency_minute_pkey', columns: [t.minute, t.service, t.scope, t.bucket] })],
);

export const claimLatencyHour = retrysafe.table(
  'claim_latency_hour',
  {
    hour: timestamp('hour', { withTimezone: true }).notNull(),
    service: text('service').notNull(),
    scope: text('scope').notNull(),
    bucket: smallint('bucket').notNull(),
    count: bigint('count', { mode: 'number' }).notNull(),
  },
  (t) => [primaryKey({ name: 'claim_latency_hour_pkey', columns: [t.hour, t.service, t.scope, t.bucket] })],
);


// The overview's steps (SERIES_STEPS in packages/store/src/recorder.ts).
const stepCheck = (column: unknown) => sql`${column} IN (60, 300, 900, 3600, 21600)`;

// The overview's series, pre-aggregated at flush (packages/store/src/recorder.ts): per step of
// the overview's ranges, the counts of each (service, scope), of each service over its scopes
// (scope '*') and of the store (service and scope '*'). Only the overview reads them; every other
// reader keeps the per-scope minute and hour tables, which never hold a '*' row.
export const flowCountsSeries = retrysafe.table(
  'flow_counts_series',
  {
    step: integer('step').notNull(),
    service: text('service').notNull(),
    scope: text('scope').notNull(),
    at: timestamp('at', { withTimezone: true }).notNull(),
    outcome: text('outcome').notNull(),
    count: bigint('count', { mode: 'number' }).notNull(),
  },
  // The primary key serves the flush upsert and the overview's read of one (step, service, scope)
  // over a range; the partial time indexes serve only the roll-up's expiry of the minute-like and
  // of the hour-like steps (seriesExpiry in server/metrics/rollup.ts, which states their
  // predicates). Each predicate also names a column no reader states and no upsert changes
  // (outcome, bucket), true of every row: a read of one step (`step = 60`, a constant in a custom
  // plan) implies `step < 3600` alone, and on rows in time order, as the flush writes them, the
  // planner then took the time index for the read's range, reading every scope's rows.
  (t) => [
    primaryKey({ name: 'flow_counts_series_pkey', columns: [t.step, t.service, t.scope, t.at, t.outcome] }),
    index('flow_counts_series_minutes_at_idx').on(t.at).where(sql.raw(`step < 3600 AND ${FLOW_SERIES_EVERY_ROW}`)),
    index('flow_counts_series_hours_at_idx').on(t.at).where(sql.raw(`step >= 3600 AND ${FLOW_SERIES_EVERY_ROW}`)),
    check('flow_counts_series_outcome', outcomeCheck(t.outcome)),
    check('flow_counts_series_step', stepCheck(t.step)),
  ],
);

export const claimLatencySeries = retrysafe.table(
  'claim_latency_series',
  {
    step: integer('step').notNull(),
    service: text('service').notNull(),
    scope: text('scope').notNull(),
    at: timestamp('at', { withTimezone: true }).notNull(),
    bucket: smallint('bucket').notNull(),
    count: bigint('count', { mode: 'number' }).notNull(),
  },
  (t) => [
    primaryKey({ name: 'claim_latency_series_pkey', columns: [t.step, t.service, t.scope, t.at, t.bucket] }),
    // As flow_counts_series's: the expiry's alone (bucket >= 0 holds for every row).
    index('claim_latency_series_minutes_at_idx').on(t.at).where(sql.raw(`step < 3600 AND ${LATENCY_SERIES_EVERY_ROW}`)),
    index('claim_latency_series_hours_at_idx').on(t.at).where(sql.raw(`step >= 3600 AND ${LATENCY_SERIES_EVERY_ROW}`)),
    check('claim_latency_series_step', stepCheck(t.step)),
  ],
);

export const storeStats = retrysafe.table(
  'store_stats',
  {
    // One sample a minute, by the sampling leader.
    sampledAt: timestamp('sampled_at', { withTimezone: true }).primaryKey(),
    estimatedRows: bigint('estimated_rows', { mode: 'number' }).notNull(),
    // Expected rows at steady state: per scope, new keys over its trailing retention.
    baselineRows: bigint('baseline_rows', { mode: 'number' }).notNull(),
    tableBytes: bigint('table_bytes', { mode: 'number' }).notNull(),
    indexBytes: bigint('index_bytes', { mode: 'number' }).notNull(),
    toastBytes: bigint('toast_bytes', { mode: 'number' }).notNull(),
    oldestRowAgeSeconds: doublePrecision('oldest_row_age_seconds'),
    cleanupLagSeconds: doublePrecision('cleanup_lag_seconds').notNull(),
    staleClaims: integer('stale_claims').notNull(),
    lastSweepRunId: bigint('last_sweep_run_id', { mode: 'number' }),
  },
  // The primary key serves every time-range read of the series.
  () => [],
);

export const storeStatsScopes = retrysafe.table(
  'store_stats_scopes',
  {
    // Taken with the store_stats sample of the same minute, from a bounded page sample of the
    // key table (server/metrics/scope-sample.ts): an estimate, not a count.
    sampledAt: timestamp('sampled_at', { withTimezone: true }).notNull(),
    service: text('service').notNull(),
    scope: text('scope').notNull(),
    estimatedRows: bigint('estimated_rows', { mode: 'number' }).notNull(),
    // Stored (sealed) response bytes of the scope: one verbose endpoint can dominate the table.
    responseBytes: bigint('response_bytes', { mode: 'number' }).notNull(),
    // Share of the table's pages the estimate read (1 = the whole table, exact).
    sampledFraction: doublePrecision('sampled_fraction').notNull(),
  },
  // Serves "the sample at or before t" (max(sampled_at) then the rows of that minute) and the expiry range delete.
  (t) => [primaryKey({ name: 'store_stats_scopes_pkey', columns: [t.sampledAt, t.service, t.scope] })],
);

const principalOutcomeCheck = (column: unknown) => sql`${column} IN ('conflict', 'mismatch', 'rejected', 'takeover', 'error', 'claims')`;

const principalTime = <Name extends string>(name: Name) => timestamp(name, { withTimezone: true }).notNull();

/**
 * The principals behind each outcome, per minute: each instance's flush adds its top-K summary's
 * counters (packages/store/src/recorder.ts), so a count is a lower bound of the truth, short by
 * at most N/(k+1) (N the bucket's events of that outcome). Scope '*' holds a service's
 * summaries merged over its scopes, service '*' the store's; 'claims' counts every outcome.
 * The same flush adds the same counters to the hour and the day tables, so each range of the
 * overview reads one of them (the 1-hour range minutes, up to 24 hours hours, longer ones days).
 *
 * The three tables are one shape with another time column: (service, scope, time, outcome,
 * principal) as the primary key, which serves the flush upsert and the overview's read of one
 * (service, scope) over a time range, and a time index for the roll-up (the minute table's
 * expiry, the hour and day tables' merge and expiry). Only the roll-up states `outcome > ''`
 * (true of every row): with a plain time index, a generic plan of the principals table's read
 * took it for its range and read every scope's rows (see migration 0022).
 */
function principalFlowTable<const Time extends 'minute' | 'hour' | 'day'>(name: `principal_flow_${Time}`, time: Time) {
  // A key computed from the type parameter: typed as the one column it is.
  const timeColumn = { [time]: principalTime(time) } as Record<Time, ReturnType<typeof principalTime<Time>>>;
  return retrysafe.table(
    name,
    {
      service: text('service').notNull(),
      scope: text('scope').notNull(),
      ...timeColumn,
      outcome: text('outcome').notNull(),
      principalId: uuid('principal_id').notNull(),
      count: bigint('count', { mode: 'number' }).notNull(),
    },
    (t) => [
      primaryKey({ name: `${name}_pkey`, columns: [t.service, t.scope, t[time], t.outcome, t.principalId] }),
      index(`${name}_${time}_idx`).on(t[time]).where(sql.raw(PRINCIPAL_TIME_INDEX_PREDICATE)),
      check(`${name}_outcome`, principalOutcomeCheck(t.outcome)),
    ],
  );
}

export const principalFlowMinute = principalFlowTable('principal_flow_minute', 'minute');
export const principalFlowHour = principalFlowTable('principal_flow_hour', 'hour');
/** Day buckets (UTC days). */
export const principalFlowDay = principalFlowTable('principal_flow_day', 'day');
