// The Retrysafe server's own tables (schema retrysafe_server, db/server-migrations): operators,
// sessions, the sign-in throttle, the audit log and the alert history, apart from the store's
// schema, which @retrysafe/store owns. (Instance starts are the store's service_starts: migration 0003.)
import { sql } from 'drizzle-orm';
import { bigint, boolean, check, doublePrecision, index, integer, primaryKey, text, timestamp, uniqueIndex, unique } from 'drizzle-orm/pg-core';
import { retrysafeServer } from './schemas';

export { retrysafeServer };
export * from './operators';
export * from './audit';

/**
 * Each time an alert fired and, once it stopped, when it ended: one row per firing, written by
 * the alert-history duty (server/metrics/alert-history.ts). service and scope are '' for an
 * alert of the whole store (or of all scopes together).
 */
export const alertHistory = retrysafeServer.table(
  'alert_history',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    check: text('check').notNull(),
    service: text('service').notNull().default(''),
    scope: text('scope').notNull().default(''),
    // About the whole store (shown whatever service or scope is chosen), as Alert.storeWide.
    storeWide: boolean('store_wide').notNull(),
    severity: text('severity').notNull(),
    // The alert's own words when it started (figures and thresholds; no key, principal or body).
    summary: text('summary').notNull(),
    startedAt: timestamp('started_at', { withTimezone: true }).notNull(),
    endedAt: timestamp('ended_at', { withTimezone: true }),
  },
  (t) => [
    // One row per firing, however many evaluators record it.
    unique('alert_history_firing_key').on(t.check, t.service, t.scope, t.startedAt),
    // At most one firing open per check, service and scope: two evaluators at once insert it once.
    // Serves the duty's read of the firings still open.
    uniqueIndex('alert_history_open_key').on(t.check, t.service, t.scope).where(sql`${t.endedAt} IS NULL`),
    // Serves the overview's starts in a window (a range, newest first).
    index('alert_history_started_idx').on(t.startedAt),
    // Serves the overview's ends in a window and the retention's delete of the oldest ended.
    index('alert_history_ended_idx').on(t.endedAt),
    check('alert_history_severity', sql`${t.severity} IN ('warning', 'critical')`),
    check('alert_history_span', sql`${t.endedAt} IS NULL OR ${t.endedAt} >= ${t.startedAt}`),
  ],
);

/**
 * What the backend of each service whose keys are kept in Redis or MySQL/MariaDB (DASHBOARD_KEYS_REDIS,
 * DASHBOARD_KEYS_MYSQL) held, once a minute (server/metrics/kept-elsewhere-samples.ts): the overview's
 * chart over time of those services, which store_stats (the Postgres key table's, no service) cannot
 * be. A figure is null when the backend did not answer. Figures of a backend shared by services are
 * its own, written under each of them.
 */
export const keptElsewhereSamples = retrysafeServer.table(
  'kept_elsewhere_samples',
  {
    service: text('service').notNull(),
    // The minute sampled (date_trunc): one row a minute however many instances sample.
    sampledAt: timestamp('sampled_at', { withTimezone: true }).notNull(),
    backend: text('backend').notNull(),
    // Redis: every key of the server (INFO keyspace); MySQL: the key table's estimated rows.
    keys: bigint('keys', { mode: 'number' }),
    // Redis: used memory; MySQL: the key table's data and index bytes.
    bytes: bigint('bytes', { mode: 'number' }),
    // The service's claims past their lease (at most 1,000 counted), and the oldest one's time past it.
    staleClaims: integer('stale_claims'),
    oldestStaleSeconds: doublePrecision('oldest_stale_seconds'),
  },
  (t) => [
    // Serves the overview's series of one service (a backward probe per step) and the sampler's insert.
    primaryKey({ name: 'kept_elsewhere_samples_pkey', columns: [t.service, t.sampledAt] }),
    // Serves the retention's delete of the oldest samples, whatever the service. Partial on a
    // predicate only that delete states, so the overview's read (a range of sampled_at within one
    // service) is never planned on it (it chose it on a new table): the primary key serves that.
    index('kept_elsewhere_samples_sampled_idx').on(t.sampledAt).where(sql`${t.sampledAt} > '-infinity'::timestamptz`),
    check('kept_elsewhere_samples_backend', sql`${t.backend} IN ('redis', 'mysql')`),
  ],
);
