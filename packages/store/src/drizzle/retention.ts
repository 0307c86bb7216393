// Retention: the published promise per endpoint, its change history, and the record of
// every sweep with the evidence compliance signs off (no row deleted inside its window).
import { sql } from 'drizzle-orm';
import { bigint, bigserial, boolean, check, doublePrecision, index, integer, jsonb, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';
import { retrysafe } from './schema.js';

export const endpointPolicies = retrysafe.table(
  'endpoint_policies',
  {
    // The service whose endpoint this is (createRetrysafe's `service`).
    service: text('service').notNull(),
    // The operation, e.g. "POST /api/v1/payments".
    endpoint: text('endpoint').notNull(),
    scopeMode: text('scope_mode', { enum: ['endpoint', 'intent'] }).notNull(),
    // The documented retry window: the public promise.
    retryWindowSeconds: integer('retry_window_seconds').notNull(),
    // What is applied: window + margin. Never shorter than the window (CHECK below).
    retentionSeconds: integer('retention_seconds').notNull(),
    leaseMs: integer('lease_ms').notNull(),
    lockTimeoutMs: integer('lock_timeout_ms').notNull(),
    maxResponseBytes: integer('max_response_bytes').notNull(),
    liveKeyQuota: integer('live_key_quota').notNull(),
    version: integer('version').notNull().default(1),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
    updatedBy: text('updated_by').notNull(),
  },
  (t) => [
    primaryKey({ name: 'endpoint_policies_pkey', columns: [t.service, t.endpoint] }),
    check('endpoint_policies_retention_covers_window', sql`${t.retentionSeconds} >= ${t.retryWindowSeconds}`),
    check('endpoint_policies_window_positive', sql`${t.retryWindowSeconds} > 0`),
    check('endpoint_policies_scope_mode', sql`${t.scopeMode} IN ('endpoint', 'intent')`),
    check(
      'endpoint_policies_limits_positive',
      sql`${t.leaseMs} > 0 AND ${t.lockTimeoutMs} > 0 AND ${t.maxResponseBytes} > 0 AND ${t.liveKeyQuota} > 0`,
    ),
  ],
);

// What a service's code declares for one of its endpoints: a route's own policy (given in code,
// in force on that route's requests), as the route last registered it. The endpoint_policies row
// stays the published promise; the retention review shows where the two differ.
export const endpointPolicyDeclarations = retrysafe.table(
  'endpoint_policy_declarations',
  {
    service: text('service').notNull(),
    endpoint: text('endpoint').notNull(),
    scopeMode: text('scope_mode', { enum: ['endpoint', 'intent'] }).notNull(),
    retryWindowSeconds: integer('retry_window_seconds').notNull(),
    retentionSeconds: integer('retention_seconds').notNull(),
    leaseMs: integer('lease_ms').notNull(),
    lockTimeoutMs: integer('lock_timeout_ms').notNull(),
    maxResponseBytes: integer('max_response_bytes').notNull(),
    liveKeyQuota: integer('live_key_quota').notNull(),
    // When a route last registered these values (each instance's start registers its routes).
    declaredAt: timestamp('declared_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    // Serves the review's join (service, endpoint) and the key lookup's scopes of a service.
    primaryKey({ name: 'endpoint_policy_declarations_pkey', columns: [t.service, t.endpoint] }),
    check('endpoint_policy_declarations_scope_mode', sql`${t.scopeMode} IN ('endpoint', 'intent')`),
  ],
);

export const endpointPolicyHistory = retrysafe.table(
  'endpoint_policy_history',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    service: text('service').notNull(),
    endpoint: text('endpoint').notNull(),
    version: integer('version').notNull(),
    changedAt: timestamp('changed_at', { withTimezone: true }).notNull().defaultNow(),
    changedBy: text('changed_by').notNull(),
    reason: text('reason').notNull(),
    // null for the policy's creation
    previous: jsonb('previous'),
    current: jsonb('current').notNull(),
    // The documented window got shorter: clients' retries late in the old window are no longer safe.
    breaking: boolean('breaking').notNull().default(false),
    acknowledged: boolean('acknowledged').notNull().default(false),
  },
  (t) => [
    // Serves one endpoint's history, newest first.
    index('endpoint_policy_history_endpoint_idx').on(t.service, t.endpoint, t.version),
    check('endpoint_policy_history_reason', sql`char_length(${t.reason}) BETWEEN 1 AND 1000`),
    check('endpoint_policy_history_breaking_acknowledged', sql`NOT ${t.breaking} OR ${t.acknowledged}`),
  ],
);

export const sweepRuns = retrysafe.table(
  'sweep_runs',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    startedAt: timestamp('started_at', { withTimezone: true }).notNull().defaultNow(),
    finishedAt: timestamp('finished_at', { withTimezone: true }),
    trigger: text('trigger', { enum: ['schedule', 'manual'] }).notNull(),
    status: text('status', { enum: ['running', 'completed', 'failed'] }).notNull(),
    chunks: integer('chunks').notNull().default(0),
    rowsDeleted: bigint('rows_deleted', { mode: 'number' }).notNull().default(0),
    staleReleased: integer('stale_released').notNull().default(0),
    longestChunkMs: doublePrecision('longest_chunk_ms').notNull().default(0),
    // Why the run stopped: a short chunk (caught up), the row budget, or an error.
    stopReason: text('stop_reason'),
    error: text('error'),
    // The partitioned layout's sweep of keys promised less than a partition's width: every expiry
    // up to this one has been walked (the next run goes on from it). Null: the run walked none.
    sweptThrough: timestamp('swept_through', { withTimezone: true }),
  },
  // "The last runs, newest first" is the primary key, descending; the walk's cursor (the latest
  // run that walked) has an index of its own, which holds only the runs that did.
  (t) => [index('sweep_runs_swept_through_idx').on(t.id).where(sql`${t.sweptThrough} IS NOT NULL`)],
);

export const sweepRunScopes = retrysafe.table(
  'sweep_run_scopes',
  {
    runId: bigint('run_id', { mode: 'number' })
      .notNull()
      .references(() => sweepRuns.id, { onDelete: 'cascade' }),
    service: text('service').notNull(),
    scope: text('scope').notNull(),
    rowsDeleted: bigint('rows_deleted', { mode: 'number' }).notNull(),
    // The youngest deleted row's age at deletion, and the window in force then: the evidence.
    minAgeSeconds: doublePrecision('min_age_seconds').notNull(),
    retryWindowSeconds: integer('retry_window_seconds'),
    minMarginSeconds: doublePrecision('min_margin_seconds'),
    // The longest a deleted row had been past its expiry: how late the cleanup came (null: runs before 0032).
    maxPastExpirySeconds: doublePrecision('max_past_expiry_seconds'),
  },
  (t) => [primaryKey({ name: 'sweep_run_scopes_pkey', columns: [t.runId, t.service, t.scope] })],
);
