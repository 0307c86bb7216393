// Endpoint policies: the published retry window per endpoint and what is applied to keep
// it. Every change is versioned in the same transaction (who, when, old -> new, why).
// Two changes break the promise to clients and need an explicit acknowledgement, and are
// flagged in the history: shortening the documented window (late retries stop being
// safe), and changing the scope mode (a retry after the switch no longer finds the key
// its original was stored under, and runs again). A key's expires_at is fixed when it is
// claimed, so a change applies to keys claimed after it; existing keys keep theirs.
import { z } from 'zod';
import { inTransaction, type Connectable } from '../../db/transaction';
import { writeAudit } from '../audit/log';
import { isStorableText } from '../storable';
import type { EndpointPolicy } from '@retrysafe/store';
import { createPolicyIfAbsent, type Queryable } from '@retrysafe/store/postgres';
import { durationWords, policyValueWords } from './policy-words';

// Every refusal is a sentence in the operator's units (policy-words.ts), never a field name or raw seconds.
const bounded = (error: string, min: number, max: number) => z.number({ error }).int({ error }).min(min, { error }).max(max, { error });
export const policyFields = z
  .object({
    scopeMode: z.enum(['endpoint', 'intent'], { error: 'the scope must be principal + endpoint or principal only (intent)' }),
    retryWindowSeconds: bounded('the retry window must be a whole number of seconds from 1 s to 366 d', 1, 366 * 86_400),
    retentionSeconds: bounded('retention must be a whole number of seconds from 1 s to 400 d', 1, 400 * 86_400),
    leaseMs: bounded('the lease must be from 0.1 s to 24 h', 100, 86_400_000),
    lockTimeoutMs: bounded('the lock wait must be from 10 ms to 10 min', 10, 600_000),
    maxResponseBytes: bounded('the largest stored response must be from 1 byte to 10 MiB', 1, 10 * 1024 * 1024),
    liveKeyQuota: bounded('the live-key quota must be from 1 to 2,000,000,000 keys', 1, 2_000_000_000),
  })
  .superRefine((policy, context) => {
    if (policy.retentionSeconds < policy.retryWindowSeconds) {
      context.addIssue({
        code: 'custom',
        message: `retention must be at least the ${durationWords(policy.retryWindowSeconds)} retry window (${durationWords(policy.retentionSeconds)} would delete keys while clients may still retry)`,
        path: ['retentionSeconds'],
      });
    }
  });
export type PolicyFields = z.infer<typeof policyFields>;

export interface PolicyRecord extends PolicyFields {
  service: string;
  endpoint: string;
  version: number;
  updatedAt: Date;
  updatedBy: string;
}

export class PolicyNotFoundError extends Error {
  readonly code = 'POLICY_NOT_FOUND';
}
export class BreakingChangeNotAcknowledgedError extends Error {
  readonly code = 'BREAKING_CHANGE_NOT_ACKNOWLEDGED';
}
export class PolicyVersionConflictError extends Error {
  readonly code = 'POLICY_VERSION_CONFLICT';
}
export class InvalidPolicyError extends Error {
  readonly code = 'INVALID_POLICY';
  constructor(readonly issues: { path: string; message: string }[]) {
    // The sentence an operator reads: the messages are already in words (policyFields).
    const text = [...new Set(issues.map((issue) => issue.message))].join('; ');
    super(`${text.charAt(0).toUpperCase()}${text.slice(1)}.`);
  }
}

/** A policy's columns as endpoint_policies and endpoint_policy_declarations both store them. */
export interface PolicyFieldsRow {
  scope_mode: 'endpoint' | 'intent';
  retry_window_seconds: number;
  retention_seconds: number;
  lease_ms: number;
  lock_timeout_ms: number;
  max_response_bytes: number;
  live_key_quota: number;
}

/** The policy fields of such a row. */
export function fieldsOfRow(row: PolicyFieldsRow): PolicyFields {
  return {
    scopeMode: row.scope_mode,
    retryWindowSeconds: row.retry_window_seconds,
    retentionSeconds: row.retention_seconds,
    leaseMs: row.lease_ms,
    lockTimeoutMs: row.lock_timeout_ms,
    maxResponseBytes: row.max_response_bytes,
    liveKeyQuota: row.live_key_quota,
  };
}

interface PolicyRow extends PolicyFieldsRow {
  service: string;
  endpoint: string;
  version: number;
  updated_at: Date;
  updated_by: string;
}

const COLUMNS = `service, endpoint, scope_mode, retry_window_seconds, retention_seconds, lease_ms, lock_timeout_ms,
  max_response_bytes, live_key_quota, version, updated_at, updated_by`;

function toRecord(row: PolicyRow): PolicyRecord {
  return { service: row.service, endpoint: row.endpoint, ...fieldsOfRow(row), version: row.version, updatedAt: row.updated_at, updatedBy: row.updated_by };
}

export function fieldsOf(record: PolicyFields): PolicyFields {
  const { scopeMode, retryWindowSeconds, retentionSeconds, leaseMs, lockTimeoutMs, maxResponseBytes, liveKeyQuota } = record;
  return { scopeMode, retryWindowSeconds, retentionSeconds, leaseMs, lockTimeoutMs, maxResponseBytes, liveKeyQuota };
}

/** The store's view of a policy. */
export function toEndpointPolicy(record: PolicyFields): EndpointPolicy {
  return {
    scopeMode: record.scopeMode,
    retryWindowMs: record.retryWindowSeconds * 1000,
    retentionMs: record.retentionSeconds * 1000,
    leaseMs: record.leaseMs,
    lockTimeoutMs: record.lockTimeoutMs,
    maxResponseBytes: record.maxResponseBytes,
    liveKeyQuota: record.liveKeyQuota,
  };
}

function validate(fields: unknown): PolicyFields {
  const parsed = policyFields.safeParse(fields);
  if (!parsed.success) {
    throw new InvalidPolicyError(parsed.error.issues.map((issue) => ({ path: issue.path.join('.'), message: issue.message })));
  }
  return parsed.data;
}

/** All policies (of one service, or every service's), by service and endpoint (primary key order). */
export async function listPolicies(db: Queryable, service?: string): Promise<PolicyRecord[]> {
  const { rows } = await db.query<PolicyRow>(
    `SELECT ${COLUMNS} FROM endpoint_policies WHERE ($1::text IS NULL OR service = $1) ORDER BY service, endpoint`,
    [service ?? null],
  );
  return rows.map(toRecord);
}

/** A scope keys can live in: a service's endpoint-scoped policy's endpoint, or "intent" when one of its policies uses it. */
export interface ServiceScope {
  service: string;
  scope: string;
}

/**
 * The scopes keys can live in, per service (of one service when given): the policies' and those
 * of routes' own policies as their code declares them (a scope mode the code kept after an admin
 * changed the published one), by both tables' primary keys.
 */
export async function knownScopes(db: Queryable, service?: string): Promise<ServiceScope[]> {
  const { rows } = await db.query<{ service: string; endpoint: string; scope_mode: 'endpoint' | 'intent' }>(
    `SELECT service, endpoint, scope_mode FROM (
       SELECT service, endpoint, scope_mode FROM endpoint_policies WHERE ($1::text IS NULL OR service = $1)
       UNION ALL
       SELECT service, endpoint, scope_mode FROM endpoint_policy_declarations WHERE ($1::text IS NULL OR service = $1)
     ) known ORDER BY service, endpoint`,
    [service ?? null],
  );
  const scopes = new Map<string, ServiceScope>();
  for (const row of rows) {
    const scope = row.scope_mode === 'intent' ? 'intent' : row.endpoint;
    scopes.set(`${row.service}\0${scope}`, { service: row.service, scope });
  }
  return [...scopes.values()];
}

export async function getPolicy(db: Queryable, service: string, endpoint: string): Promise<PolicyRecord | null> {
  const { rows } = await db.query<PolicyRow>(`SELECT ${COLUMNS} FROM endpoint_policies WHERE service = $1 AND endpoint = $2`, [service, endpoint]);
  const row = rows[0];
  return row ? toRecord(row) : null;
}

/** Anything that hands out a connection for a transaction (a pg.Pool). */
export type Transactional = Connectable;

/**
 * Creates the policies that do not exist yet (first start); existing ones are left alone. The
 * package's creation (createPolicyIfAbsent: the row, its history entry and audit row in one
 * statement, the partitions a longer retention needs), after the dashboard's own validation.
 */
export async function ensurePolicies(db: Queryable, service: string, defaults: Record<string, PolicyFields>, actor: string): Promise<string[]> {
  const created: string[] = [];
  for (const [endpoint, fields] of Object.entries(defaults)) {
    const policy = validate(fields);
    if (await createPolicyIfAbsent(db, service, endpoint, toEndpointPolicy(policy), 'service default', actor)) created.push(endpoint);
  }
  return created;
}

export interface PolicyChange {
  service: string;
  endpoint: string;
  fields: unknown;
  actor: string;
  reason: string;
  /** The version the change was made against (optimistic concurrency). */
  expectedVersion: number;
  /** Required when the documented retry window gets shorter. */
  acknowledgeBreakingChange?: boolean;
}

export interface PolicyChangeResult {
  policy: PolicyRecord;
  breaking: boolean;
}

/** Why a change breaks the promise to clients (empty when it does not). */
export function breakingReasons(current: PolicyFields, next: PolicyFields): string[] {
  const reasons: string[] = [];
  if (next.retryWindowSeconds < current.retryWindowSeconds) {
    reasons.push(`shortening the documented retry window from ${durationWords(current.retryWindowSeconds)} to ${durationWords(next.retryWindowSeconds)} makes late retries unsafe`);
  }
  if (next.scopeMode !== current.scopeMode) {
    reasons.push(`changing the scope from ${policyValueWords('scopeMode', current.scopeMode)} to ${policyValueWords('scopeMode', next.scopeMode)} makes retries of earlier requests run again`);
  }
  return reasons;
}

type RefusedPolicyChange = InvalidPolicyError | BreakingChangeNotAcknowledgedError | PolicyVersionConflictError | PolicyNotFoundError;

function isRefusal(error: unknown): error is RefusedPolicyChange {
  return error instanceof InvalidPolicyError || error instanceof BreakingChangeNotAcknowledgedError || error instanceof PolicyVersionConflictError || error instanceof PolicyNotFoundError;
}

/**
 * Changes a policy, with its history entry and audit row, in one transaction. A refused change
 * is audited too (policy.change_refused, with the refusal in words), after its transaction
 * rolled back, so compliance sees attempts to weaken the promise as well as changes.
 */
export async function changePolicy(pool: Transactional, change: PolicyChange): Promise<PolicyChangeResult> {
  try {
    return await applyPolicyChange(pool, change);
  } catch (error) {
    if (!isRefusal(error)) throw error;
    await inTransaction(pool, async (db) => {
      // The policy as it stands, so the entry reads as "retention 26 h -> 12 h, refused".
      const standing = await getPolicy(db, change.service, change.endpoint);
      await writeAudit(db, {
        actor: change.actor,
        action: 'policy.change_refused',
        target: { service: change.service, endpoint: change.endpoint, version: change.expectedVersion },
        reason: change.reason.trim().slice(0, 1000) || null,
        details: { refusal: error.message, code: error.code, previous: standing ? fieldsOf(standing) : null, proposed: proposedForAudit(change.fields), acknowledged: change.acknowledgeBreakingChange === true },
      });
    });
    throw error;
  }
}

/**
 * What a refused change proposed, as the audit log can hold it: the proposal is whatever the
 * caller sent (a refusal is often of bad input), so text Postgres cannot store (a NUL, a lone
 * surrogate) is named rather than written, long text is cut, and only plain values are kept.
 */
function proposedForAudit(fields: unknown): Record<string, unknown> {
  const proposed: Record<string, unknown> = {};
  if (typeof fields !== 'object' || fields === null || Array.isArray(fields)) return proposed;
  for (const [name, value] of Object.entries(fields).slice(0, 20)) {
    if (!isStorableText(name)) continue;
    const field = name.slice(0, 100);
    if (typeof value === 'string') proposed[field] = isStorableText(value) ? value.slice(0, 200) : '(text that cannot be stored)';
    else if (typeof value === 'number' || typeof value === 'boolean' || value === null) proposed[field] = value;
    else proposed[field] = `(${Array.isArray(value) ? 'a list' : typeof value}, not a policy value)`;
  }
  return proposed;
}

async function applyPolicyChange(pool: Transactional, change: PolicyChange): Promise<PolicyChangeResult> {
  const next = validate(change.fields);
  const reason = change.reason.trim();
  if (reason.length === 0 || reason.length > 1000) throw new InvalidPolicyError([{ path: 'reason', message: 'a reason of 1 to 1000 characters is required' }]);
  return inTransaction(pool, async (db) => {
    const { rows } = await db.query<PolicyRow>(`SELECT ${COLUMNS} FROM endpoint_policies WHERE service = $1 AND endpoint = $2 FOR UPDATE`, [change.service, change.endpoint]);
    const row = rows[0];
    if (!row) throw new PolicyNotFoundError(`No policy for ${change.endpoint} of service ${change.service}`);
    const current = toRecord(row);
    if (current.version !== change.expectedVersion) {
      throw new PolicyVersionConflictError(`The policy changed meanwhile (now version ${current.version})`);
    }
    const reasons = breakingReasons(current, next);
    const breaking = reasons.length > 0;
    if (breaking && change.acknowledgeBreakingChange !== true) {
      const text = reasons.join('; ');
      throw new BreakingChangeNotAcknowledgedError(`${text.charAt(0).toUpperCase()}${text.slice(1)}: acknowledge the breaking change to save it.`);
    }
    const version = current.version + 1;
    const updated = await db.query<PolicyRow>(
      `UPDATE endpoint_policies SET scope_mode = $2, retry_window_seconds = $3, retention_seconds = $4, lease_ms = $5,
         lock_timeout_ms = $6, max_response_bytes = $7, live_key_quota = $8, version = $9, updated_at = now(), updated_by = $10
       WHERE service = $11 AND endpoint = $1 RETURNING ${COLUMNS}`,
      [change.endpoint, next.scopeMode, next.retryWindowSeconds, next.retentionSeconds, next.leaseMs, next.lockTimeoutMs, next.maxResponseBytes, next.liveKeyQuota, version, change.actor, change.service],
    );
    const previous = fieldsOf(current);
    await db.query(
      `INSERT INTO endpoint_policy_history (service, endpoint, version, changed_by, reason, previous, current, breaking, acknowledged)
       VALUES ($9, $1, $2, $3, $4, $5, $6, $7, $8)`,
      [change.endpoint, version, change.actor, reason, JSON.stringify(previous), JSON.stringify(next), breaking, breaking, change.service],
    );
    // Partitioned layout: partitions must exist beyond the (possibly longer) retention now.
    await db.query('SELECT retrysafe_ensure_partitions()');
    await writeAudit(db, { actor: change.actor, action: 'policy.change', target: { service: change.service, endpoint: change.endpoint, version }, reason, details: { previous, current: next, breaking, acknowledged: breaking && change.acknowledgeBreakingChange === true } });
    const record = updated.rows[0];
    if (!record) throw new Error('policy update returned no row');
    return { policy: toRecord(record), breaking };
  });
}

export interface PolicyHistoryEntry {
  id: number;
  service: string;
  endpoint: string;
  version: number;
  changedAt: Date;
  changedBy: string;
  reason: string;
  previous: PolicyFields | null;
  current: PolicyFields;
  breaking: boolean;
  acknowledged: boolean;
}

/** History, newest first; one service's endpoint's through endpoint_policy_history_endpoint_idx. */
/** The newest changes first: of every policy, of one service's (`endpoint` omitted), or of one policy. */
export async function policyHistory(db: Queryable, of?: { service: string; endpoint?: string | undefined }, limit = 200): Promise<PolicyHistoryEntry[]> {
  const { rows } = await db.query<{
    id: string;
    service: string;
    endpoint: string;
    version: number;
    changed_at: Date;
    changed_by: string;
    reason: string;
    previous: PolicyFields | null;
    current: PolicyFields;
    breaking: boolean;
    acknowledged: boolean;
  }>(
    `SELECT id, service, endpoint, version, changed_at, changed_by, reason, previous, current, breaking, acknowledged
     FROM endpoint_policy_history WHERE ($1::text IS NULL OR (service = $1 AND ($3::text IS NULL OR endpoint = $3))) ORDER BY changed_at DESC, id DESC LIMIT $2`,
    [of?.service ?? null, limit, of?.endpoint ?? null],
  );
  return rows.map((row) => ({
    id: Number(row.id),
    service: row.service,
    endpoint: row.endpoint,
    version: row.version,
    changedAt: row.changed_at,
    changedBy: row.changed_by,
    reason: row.reason,
    previous: row.previous,
    current: row.current,
    breaking: row.breaking,
    acknowledged: row.acknowledged,
  }));
}
