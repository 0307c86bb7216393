// The trace of rejected and replayed attempts (issue 31.1): each replay, conflict (409), mismatch
// (422) and quota refusal (429) with its correlation id, and each key's counts of them. Written
// only by the flow recorder's flush (one statement for the whole batch, never on the request
// path), at most 20 attempts kept per key; no body, no fingerprint. Each row expires with its key
// (the key's expires_at when it was live at the flush, else the attempt's time plus its policy's
// retention) and the sweeper deletes it then, through the expires_at indexes.
import { sql } from 'drizzle-orm';
import { check, index, integer, primaryKey, smallint, text, timestamp, uuid } from 'drizzle-orm/pg-core';
import { retrysafe } from './schema.js';

export const attemptOutcomes = ['replay', 'conflict', 'mismatch', 'rejected'] as const;
export type AttemptOutcome = (typeof attemptOutcomes)[number];

/** Attempts kept per key: the flush prunes the older ones in the same statement. */
export const ATTEMPTS_KEPT_PER_KEY = 20;

export const keyAttempts = retrysafe.table(
  'key_attempts',
  {
    at: timestamp('at', { withTimezone: true }).notNull(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    principalId: uuid('principal_id').notNull(),
    // The attempt's own id (the X-Correlation-Id of its 409, 422 or 429; a replay answers with the original's).
    correlationId: uuid('correlation_id').notNull(),
    status: smallint('status').notNull(),
    service: text('service').notNull(),
    scope: text('scope').notNull(),
    key: text('key').notNull(),
    outcome: text('outcome', { enum: attemptOutcomes }).notNull(),
  },
  (t) => [
    // Serves the key record's "last attempts" (newest first) and the flush's prune per key.
    primaryKey({ name: 'key_attempts_pkey', columns: [t.principalId, t.service, t.scope, t.key, t.at, t.correlationId] }),
    // Serves the correlation lookup of a rejected attempt's id.
    index('key_attempts_correlation_idx').on(t.correlationId),
    // Serves the sweeper's chunked delete of attempts past their key's expiry.
    index('key_attempts_expiry_idx').on(t.expiresAt),
    check('key_attempts_outcome', sql`${t.outcome} IN ('replay', 'conflict', 'mismatch', 'rejected')`),
    check('key_attempts_status', sql`${t.status} BETWEEN 100 AND 599`),
  ],
);

export const keyAttemptCounts = retrysafe.table(
  'key_attempt_counts',
  {
    lastAt: timestamp('last_at', { withTimezone: true }).notNull(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    principalId: uuid('principal_id').notNull(),
    replays: integer('replays').notNull().default(0),
    conflicts: integer('conflicts').notNull().default(0),
    mismatches: integer('mismatches').notNull().default(0),
    quotaRefusals: integer('quota_refusals').notNull().default(0),
    service: text('service').notNull(),
    scope: text('scope').notNull(),
    key: text('key').notNull(),
  },
  (t) => [
    // Serves the flush's upsert and the key record's counts.
    primaryKey({ name: 'key_attempt_counts_pkey', columns: [t.principalId, t.service, t.scope, t.key] }),
    // Serves the key list's "troubled keys first" for one principal (conflicts + mismatches).
    index('key_attempt_counts_troubled_idx').on(t.principalId, sql`(${t.conflicts} + ${t.mismatches}) DESC`).where(sql`${t.conflicts} + ${t.mismatches} > 0`),
    // Serves the sweeper's chunked delete of counts past their key's expiry.
    index('key_attempt_counts_expiry_idx').on(t.expiresAt),
  ],
);
