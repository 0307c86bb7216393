// The audit log: who did what to which record, and why. Append-only (a trigger refuses
// UPDATE and DELETE, see the migration); written in the same transaction as the action.
import { sql } from 'drizzle-orm';
import { bigserial, check, index, jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

export const auditLog = pgTable(
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
  },
  (t) => [
    // Serves the audit page's filters: by time, by actor, by action (each newest first).
    index('audit_log_at_idx').on(t.at),
    index('audit_log_actor_at_idx').on(t.actor, t.at),
    index('audit_log_action_at_idx').on(t.action, t.at),
    check('audit_log_action', sql`char_length(${t.action}) BETWEEN 1 AND 100`),
  ],
);
