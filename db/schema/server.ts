// The Retrysafe server's own tables (schema retrysafe_server, db/server-migrations): what the
// server itself records for the overview's events, apart from the store's schema, which
// @retrysafe/store owns. Written by the server's duties and its start; the dashboard reads them.
import { sql } from 'drizzle-orm';
import { bigint, boolean, check, index, text, timestamp, uniqueIndex, unique } from 'drizzle-orm/pg-core';
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
 * Each start of a Retrysafe server instance, with the @retrysafe/store version it runs
 * (server/instance-starts.ts). An adopting service's own starts are not here: the package
 * records none (a follow-up of the package's schema).
 */
export const instanceStarts = retrysafeServer.table(
  'instance_starts',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    startedAt: timestamp('started_at', { withTimezone: true }).notNull().defaultNow(),
    // The service whose requests this instance serves (the demo API's).
    service: text('service').notNull(),
    // host:pid, so two instances starting at once are told apart.
    instance: text('instance').notNull(),
    packageVersion: text('package_version').notNull(),
  },
  (t) => [
    // Serves the overview's starts in a window (a range, newest first) and the retention's delete.
    index('instance_starts_started_idx').on(t.startedAt),
    check('instance_starts_lengths', sql`char_length(${t.service}) <= 200 AND char_length(${t.instance}) <= 300 AND char_length(${t.packageVersion}) <= 100`),
  ],
);
