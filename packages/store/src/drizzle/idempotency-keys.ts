// The idempotency-key store: one row per (principal, service, scope, key) claim.
// Every column answers a failure mode named in the design lesson; see the
// comments on each, and the package's migrations for why each index exists.
import { sql } from 'drizzle-orm';
import { check, index, integer, primaryKey, smallint, text, timestamp, uuid } from 'drizzle-orm/pg-core';
import { retrysafe } from './schema.js';
import { bytea } from './types.js';
// The partial indexes' predicates: stated once (index-predicates.ts, the constants-only entry
// the store's reads use too), imported here to build the indexes.
import { CORRELATION_INDEX_PREDICATE, EXPIRY_INDEX_PREDICATE, PRINCIPAL_CREATED_INDEX_PREDICATE, STALE_LEASE_INDEX_PREDICATE } from '../index-predicates.js';

export const claimStates = ['in_progress', 'completed', 'failed'] as const;
export type ClaimState = (typeof claimStates)[number];

export const idempotencyKeys = retrysafe.table(
  'idempotency_keys',
  {
    // Fixed-width columns first so the row packs without alignment padding.
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    // Fixed at claim time from the endpoint policy in force then: the published promise.
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    // Only meaningful while in_progress: after it, a claim-first attempt is presumed crashed.
    leaseExpiresAt: timestamp('lease_expires_at', { withTimezone: true }),
    completedAt: timestamp('completed_at', { withTimezone: true }),
    // Scope part 1, mandatory: without it two tenants' keys collide and disclose.
    principalId: uuid('principal_id').notNull(),
    // Links a replay to the original request in logs and traces; a replay carries it.
    correlationId: uuid('correlation_id').notNull(),
    // Plaintext byte size of the stored response (also when only a reference is stored).
    responseSize: integer('response_size'),
    // 1 for the first attempt, +1 per takeover. Also the fencing token: only the attempt
    // that holds the current number may complete or fail the claim.
    attempts: integer('attempts').notNull().default(1),
    responseStatus: smallint('response_status'),
    // Scope part 2: the service that owns the key (createRetrysafe's `service`), so two services
    // sharing a database, principal ids and endpoint strings never share a key.
    service: text('service').notNull(),
    // Scope part 3: the endpoint (e.g. "POST /api/v1/payments"), or "intent" for principal-only policies.
    scope: text('scope').notNull(),
    // Client supplied: bounded here and validated (charset) at the HTTP boundary.
    key: text('key').notNull(),
    state: text('state', { enum: claimStates }).notNull(),
    // HMAC-SHA256 of the canonical request, never the body itself.
    fingerprint: bytea('fingerprint').notNull(),
    responseContentType: text('response_content_type'),
    // AES-256-GCM ciphertext of the response body, under the key named by response_key_id.
    responseBody: bytea('response_body'),
    responseKeyId: text('response_key_id'),
    // For a response over the policy's size cap: what the endpoint re-derives the replay from.
    responseRef: text('response_ref'),
  },
  (t) => [
    // The unique scoped key IS the concurrency control: the claim is INSERT ... ON CONFLICT
    // against it. It is the primary key, so the table needs no surrogate id and no second
    // unique index to maintain on every claim.
    primaryKey({ name: 'idempotency_keys_pkey', columns: [t.principalId, t.service, t.scope, t.key] }),
    // The primary key is the only index a request-path statement may be planned on, whatever
    // the statistics say. On a young table every index costs the same to the planner, and it
    // broke the tie on whichever came first: the completion read a principal's every key
    // through (principal_id, created_at), and a cached generic plan kept doing so. So each
    // secondary index is partial on a predicate that is true of every row it must hold but
    // that no request-path statement states or implies (server/idempotency/statements.ts);
    // the statements that want the index state it (the *_PREDICATE constants below).
    //
    // Serves the sweeper's "expires_at < now() ORDER BY expires_at LIMIT n" range scan and
    // the oldest-row / cleanup-lag figures (min(expires_at)) without touching the heap.
    index('idempotency_keys_expiry_idx').on(t.expiresAt).where(sql.raw(EXPIRY_INDEX_PREDICATE)),
    // Serves the stale-claim scan "state = 'in_progress' AND lease_expires_at < now()";
    // tiny because in-progress rows are a vanishing fraction of the table. The completion
    // says state = 'in_progress' but nothing of the lease, so it cannot use this index.
    index('idempotency_keys_stale_lease_idx').on(t.leaseExpiresAt).where(sql.raw(STALE_LEASE_INDEX_PREDICATE)),
    // Serves the dashboard's "this principal's recent keys", newest first, a page at a time.
    // The one index not needed by the claim itself; it costs 3 to 10% of peak claim throughput
    // (bench, docs/benchmarks.md: measured at 10M rows), paid so an operator can see what a tenant just did.
    index('idempotency_keys_principal_created_idx').on(t.principalId, t.createdAt).where(sql.raw(PRINCIPAL_CREATED_INDEX_PREDICATE)),
    // Serves the dashboard's lookup by the X-Correlation-Id a customer quotes, across the store.
    // Written on every claim like the one above (its cost: docs/benchmarks.md, "Correlation ids").
    index('idempotency_keys_correlation_idx').on(t.correlationId).where(sql.raw(CORRELATION_INDEX_PREDICATE)),
    check('idempotency_keys_key_length', sql`octet_length(${t.key}) BETWEEN 1 AND 255`),
    check('idempotency_keys_service_name', sql`${t.service} ~ '^[a-z0-9][a-z0-9._-]{0,62}$'`),
    check('idempotency_keys_scope_length', sql`octet_length(${t.scope}) BETWEEN 1 AND 200`),
    check('idempotency_keys_state', sql`${t.state} IN ('in_progress', 'completed', 'failed')`),
    check('idempotency_keys_fingerprint_size', sql`octet_length(${t.fingerprint}) = 32`),
    check('idempotency_keys_in_progress_has_lease', sql`${t.state} <> 'in_progress' OR ${t.leaseExpiresAt} IS NOT NULL`),
    check(
      'idempotency_keys_completed_has_response',
      sql`${t.state} <> 'completed' OR (${t.responseStatus} IS NOT NULL AND ${t.completedAt} IS NOT NULL AND (${t.responseBody} IS NOT NULL OR ${t.responseRef} IS NOT NULL))`,
    ),
    check('idempotency_keys_response_status', sql`${t.responseStatus} IS NULL OR ${t.responseStatus} BETWEEN 100 AND 599`),
    check('idempotency_keys_body_has_key_id', sql`${t.responseBody} IS NULL OR ${t.responseKeyId} IS NOT NULL`),
    check('idempotency_keys_body_or_ref', sql`${t.responseBody} IS NULL OR ${t.responseRef} IS NULL`),
    check('idempotency_keys_expiry_after_creation', sql`${t.expiresAt} > ${t.createdAt}`),
  ],
);
