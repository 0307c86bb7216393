// The audit log: who did what to which record, and why. Append-only (a trigger refuses
// UPDATE and DELETE, see the migration; the one exception is an aggregated row's count going
// up); written in the same transaction as the action. The Retrysafe server's (schema
// retrysafe_server, its migration 0002), not the store's: only the dashboard's actions are audited.
import { sql } from 'drizzle-orm';
import { bigserial, check, index, integer, jsonb, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import { retrysafeServer } from './schemas';

export const auditLog = retrysafeServer.table(
  'audit_log',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    at: timestamp('at', { withTimezone: true }).notNull().defaultNow(),
    actor: text('actor').notNull(),
    action: text('action').notNull(),
    // What the action touched (ids only, never stored responses).
    target: jsonb('target').notNull(),
    reason: text('reason'),
    details: jsonb('details'),
    // Repeated failed or refused sign-ins of one account from one address in one window are one
    // row counting them (retrysafe_audit_sign_in_attempt, the server's migration 0001); every other row is 1.
    occurrences: integer('occurrences').notNull().default(1),
    lastAt: timestamp('last_at', { withTimezone: true }),
    // "<action>|<actor>|<address>|<window start>" on aggregated rows, null on every other row.
    aggregateKey: text('aggregate_key'),
  },
  (t) => [
    // Serves the audit page's filters: by time, by actor, by action (each newest first).
    index('audit_log_at_idx').on(t.at),
    index('audit_log_actor_at_idx').on(t.actor, t.at),
    index('audit_log_action_at_idx').on(t.action, t.at),
    check('audit_log_action', sql`char_length(${t.action}) BETWEEN 1 AND 100`),
    check('audit_log_occurrences', sql`${t.occurrences} >= 1`),
    // Serves the aggregation's upsert (ON CONFLICT): one row per key.
    uniqueIndex('audit_log_aggregate_key_idx').on(t.aggregateKey).where(sql`${t.aggregateKey} IS NOT NULL`),
  ],
);
