// Dual-write reconciliation of a Redis-kept service (issue 27.5): what a service's reconciler
// found by sampling its Redis key records and asking the adopter's effectExists. Findings are
// metadata only: principal, service, scope, key, the attempt's correlation id, the record's state
// and times, whether the effect was found; never a body, a fingerprint or an error message. A
// finding that resolves (its effect appears, its key completes, is taken over or expires) is
// deleted by a later run; each also expires with its key's retention (the sweeper deletes it then).
import { sql } from 'drizzle-orm';
import { check, index, integer, primaryKey, text, timestamp, uuid } from 'drizzle-orm/pg-core';
import { retrysafe } from './schema.js';

export const reconcileFindings = retrysafe.table(
  'reconcile_findings',
  {
    principalId: uuid('principal_id').notNull(),
    service: text('service').notNull(),
    scope: text('scope').notNull(),
    key: text('key').notNull(),
    // effect_missing: completed, and effectExists said no; stale_claim: in progress past its lease.
    kind: text('kind').notNull(),
    // For a stale claim, what effectExists said: present (effect done, completion lost), missing, or unknown (it failed).
    effect: text('effect').notNull(),
    correlationId: text('correlation_id').notNull(),
    attempts: integer('attempts').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
    completedAt: timestamp('completed_at', { withTimezone: true }),
    leaseExpiredAt: timestamp('lease_expired_at', { withTimezone: true }),
    // The key's own expiry (its record's retention): the finding goes with it.
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    foundAt: timestamp('found_at', { withTimezone: true }).notNull(),
    checkedAt: timestamp('checked_at', { withTimezone: true }).notNull(),
  },
  (t) => [
    // Serves the run's upsert and delete of one key's finding.
    primaryKey({ name: 'reconcile_findings_pkey', columns: [t.principalId, t.service, t.scope, t.key] }),
    // Serves the run's re-check of its service's findings, least recently checked first (a range
    // read in order, stopped at the budget); the counts and the operator's list of one service read
    // its prefix (at most maxFindings rows a service).
    index('reconcile_findings_service_idx').on(t.service, t.checkedAt),
    // Serves the sweeper's chunked delete of findings past their key's retention.
    index('reconcile_findings_expiry_idx').on(t.expiresAt),
    check('reconcile_findings_kind', sql`${t.kind} IN ('effect_missing', 'stale_claim')`),
    check('reconcile_findings_effect', sql`${t.effect} IN ('present', 'missing', 'unknown')`),
  ],
);

/** One row per service: its reconciler's last run (how much it examined, how effectExists fared). */
export const reconcileRuns = retrysafe.table('reconcile_runs', {
  service: text('service').primaryKey(),
  at: timestamp('at', { withTimezone: true }).notNull(),
  durationMs: integer('duration_ms').notNull(),
  // Records read from Redis this run (re-checks and samples), and effectExists calls made.
  examined: integer('examined').notNull(),
  effectChecks: integer('effect_checks').notNull(),
  // effectExists calls that threw or timed out (counted, reported to onError, never a finding).
  effectErrors: integer('effect_errors').notNull(),
  // Findings this run could not list (the list of the service was at its bound).
  unlisted: integer('unlisted').notNull(),
  // Total effectExists errors since the finding table was created, for a Prometheus increase().
  effectErrorsTotal: integer('effect_errors_total').notNull(),
});
