// Completions that could not be recorded (issue 26.2): an attempt whose work ran and whose
// response the store could not record (its completion failed, and where the failure allowed it,
// failed again until shortly before its lease ended), so a retry after the lease runs the work
// again. Principal-scoped metadata only: the key, its attempt's correlation id, when, and the
// error's class (its SQLSTATE or code and its type, never its message); no body, no fingerprint.
// Written only by the flow recorder's flush from each instance's bounded buffer (the failure
// path, never the request path's happy one), so the overview sums every instance's. Each row
// expires with its key's retention (when the failure happened plus the policy's retention) and
// the sweeper deletes it then, through the expires_at index.
import { index, primaryKey, text, timestamp, uuid } from 'drizzle-orm/pg-core';
import { retrysafe } from './schema.js';

export const unrecordedCompletions = retrysafe.table(
  'unrecorded_completions',
  {
    at: timestamp('at', { withTimezone: true }).notNull(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    principalId: uuid('principal_id').notNull(),
    // The attempt's own id (its X-Correlation-Id): what its work ran under.
    correlationId: uuid('correlation_id').notNull(),
    service: text('service').notNull(),
    scope: text('scope').notNull(),
    key: text('key').notNull(),
    // The error's class: "DatabaseError 42501", "Error ECONNRESET" (never its message).
    errorClass: text('error_class').notNull(),
  },
  (t) => [
    // Serves the flush's insert (a flush sent again adds nothing twice) and a key's own rows.
    primaryKey({ name: 'unrecorded_completions_pkey', columns: [t.principalId, t.service, t.scope, t.key, t.correlationId] }),
    // Serves the overview's count per service over the last hour (an index-only range) and the
    // operator's list of the keys, newest first (the same range read backwards).
    index('unrecorded_completions_at_idx').on(t.at, t.service),
    // Serves the sweeper's chunked delete of rows past their key's retention.
    index('unrecorded_completions_expiry_idx').on(t.expiresAt),
  ],
);
