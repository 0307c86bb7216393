// What the dashboard may know about a stored key: metadata only. The columns are named one
// by one and response_body is never among them (the dashboard's database role could not
// read it anyway). A lookup is scoped to one principal and audited with its reason in the
// same transaction; a key under another principal and an absent key look exactly alike.
import { z } from 'zod';
import { inTransaction, type Connectable } from '../../db/transaction';
import { writeAudit } from '../audit/log';
import type { Queryable } from './statements';

export const keyLookupSchema = z.strictObject({
  principalId: z.uuid('must be a principal id (UUID)'),
  key: z.string().regex(/^[\x21-\x7e]{1,255}$/, 'must be 1 to 255 visible ASCII characters'),
  reason: z.string().trim().min(3, 'say why you look this key up').max(500),
});
export type KeyLookup = z.infer<typeof keyLookupSchema>;

export interface KeyRecord {
  scope: string;
  state: 'in_progress' | 'completed' | 'failed';
  statusCode: number | null;
  contentType: string | null;
  /** Plaintext bytes of the stored response (also when only a reference is kept). */
  responseSize: number | null;
  storedAs: 'body' | 'reference' | null;
  correlationId: string;
  createdAt: string;
  completedAt: string | null;
  expiresAt: string;
  /** Seconds left before the key expires (0 once it has). */
  secondsLeft: number;
  leaseExpiresAt: string | null;
  /** First 8 hex digits of the request fingerprint: enough to tell two requests apart, not to recompute one. */
  fingerprintPrefix: string;
  attempts: number;
  /** Takeovers of a crashed attempt: attempts after the first. */
  takeovers: number;
}

/**
 * Every scope's record of (principal, key): one primary-key probe per known scope (the
 * policies' endpoints and "intent"), so a principal with millions of keys costs the same.
 */
export async function readKeyRecords(db: Queryable, principalId: string, key: string): Promise<KeyRecord[]> {
  const { rows } = await db.query<{
    scope: string;
    state: KeyRecord['state'];
    response_status: number | null;
    response_content_type: string | null;
    response_size: number | null;
    stored_as: KeyRecord['storedAs'];
    correlation_id: string;
    created_at: Date;
    completed_at: Date | null;
    expires_at: Date;
    seconds_left: number;
    lease_expires_at: Date | null;
    fingerprint_prefix: string;
    attempts: number;
  }>({
    name: 'dashboard_key_records',
    text: `SELECT k.scope, k.state, k.response_status, k.response_content_type, k.response_size,
                  CASE WHEN k.response_ref IS NOT NULL THEN 'reference' WHEN k.response_key_id IS NOT NULL THEN 'body' END AS stored_as,
                  k.correlation_id, k.created_at, k.completed_at, k.expires_at,
                  greatest(0, extract(epoch FROM k.expires_at - now()))::float8 AS seconds_left,
                  k.lease_expires_at, encode(substring(k.fingerprint FROM 1 FOR 4), 'hex') AS fingerprint_prefix, k.attempts
           FROM idempotency_keys k
           WHERE k.principal_id = $1 AND k.key = $2
             AND k.scope = ANY (ARRAY(SELECT endpoint FROM endpoint_policies) || ARRAY['intent'])
           ORDER BY k.scope, k.expires_at DESC`,
    values: [principalId, key],
  });
  return rows.map((row) => ({
    scope: row.scope,
    state: row.state,
    statusCode: row.response_status,
    contentType: row.response_content_type,
    responseSize: row.response_size,
    storedAs: row.stored_as,
    correlationId: row.correlation_id,
    createdAt: row.created_at.toISOString(),
    completedAt: row.completed_at?.toISOString() ?? null,
    expiresAt: row.expires_at.toISOString(),
    secondsLeft: Math.round(row.seconds_left),
    leaseExpiresAt: row.lease_expires_at?.toISOString() ?? null,
    fingerprintPrefix: row.fingerprint_prefix,
    attempts: row.attempts,
    takeovers: Math.max(0, row.attempts - 1),
  }));
}

/** A lookup by an operator: the records, with the audit row (who, why, what was asked) in the same transaction. */
export async function lookUpKey(pool: Connectable, lookup: KeyLookup, actor: string): Promise<KeyRecord[]> {
  return inTransaction(pool, async (db) => {
    const records = await readKeyRecords(db, lookup.principalId, lookup.key);
    await writeAudit(db, {
      actor,
      action: 'key.lookup',
      target: { principalId: lookup.principalId, key: lookup.key },
      reason: lookup.reason,
      details: { records: records.length },
    });
    return records;
  });
}

export const staleClaimsQuery = z.strictObject({ limit: z.coerce.number().int().min(1).max(500).default(100) });

export const staleReleaseSchema = z.strictObject({
  principalId: z.uuid(),
  scope: z.string().min(1).max(200),
  key: z.string().regex(/^[\x21-\x7e]{1,255}$/),
  reason: z.string().trim().min(3, 'say why you release this claim').max(500),
});

export interface StaleClaim {
  principalId: string;
  scope: string;
  key: string;
  createdAt: string;
  leaseExpiredAt: string;
  /** How long ago the lease ended, seconds. */
  pastLeaseSeconds: number;
  attempts: number;
  correlationId: string;
}

/** In-progress claims past their lease, oldest lease first: a range scan of the partial index. */
export async function listStaleClaims(db: Queryable, limit: number): Promise<StaleClaim[]> {
  const { rows } = await db.query<{ principal_id: string; scope: string; key: string; created_at: Date; lease_expires_at: Date; past: number; attempts: number; correlation_id: string }>({
    name: 'dashboard_stale_claims',
    text: `SELECT principal_id, scope, key, created_at, lease_expires_at, extract(epoch FROM now() - lease_expires_at)::float8 AS past, attempts, correlation_id
           FROM idempotency_keys WHERE state = 'in_progress' AND lease_expires_at < now()
           ORDER BY lease_expires_at LIMIT $1`,
    values: [limit],
  });
  return rows.map((row) => ({
    principalId: row.principal_id,
    scope: row.scope,
    key: row.key,
    createdAt: row.created_at.toISOString(),
    leaseExpiredAt: row.lease_expires_at.toISOString(),
    pastLeaseSeconds: Math.round(row.past),
    attempts: row.attempts,
    correlationId: row.correlation_id,
  }));
}

export const keyListSchema = z.strictObject({
  principalId: z.uuid('must be a principal id (UUID)'),
  reason: z.string().trim().min(3, 'say why you list these keys').max(500),
  scope: z.string().min(1).max(200).optional(),
  state: z.enum(['in_progress', 'completed', 'failed']).optional(),
  /** Keyset cursor: the last (scope, key) of the previous page. */
  after: z.strictObject({ scope: z.string().min(1).max(200), key: z.string().min(1).max(255) }).optional(),
  limit: z.number().int().min(1).max(200).default(50),
});
export type KeyList = z.infer<typeof keyListSchema>;

export interface KeySummary {
  scope: string;
  key: string;
  state: KeyRecord['state'];
  statusCode: number | null;
  createdAt: string;
  expiresAt: string;
}

/**
 * One principal's live keys in primary-key order (scope, then key), a page at a time: a
 * range scan of the primary key from the cursor, so a principal with millions of keys costs
 * one page. (Newest-first would need a (principal_id, created_at) index on the hot table.)
 * Listing reveals key strings, so it takes a reason and is audited like a lookup.
 */
export async function listPrincipalKeys(pool: Connectable, list: KeyList, actor: string): Promise<{ keys: KeySummary[]; next: { scope: string; key: string } | null }> {
  const statement = principalKeysStatement(list);
  return inTransaction(pool, async (db) => {
    const { rows } = await db.query<{ scope: string; key: string; state: KeyRecord['state']; response_status: number | null; created_at: Date; expires_at: Date }>(statement);
    const page = rows.slice(0, list.limit);
    await writeAudit(db, {
      actor,
      action: 'key.list',
      target: { principalId: list.principalId },
      reason: list.reason,
      details: { scope: list.scope ?? null, state: list.state ?? null, after: list.after ?? null, keys: page.length },
    });
    const last = page.at(-1);
    return {
      keys: page.map((row) => ({ scope: row.scope, key: row.key, state: row.state, statusCode: row.response_status, createdAt: row.created_at.toISOString(), expiresAt: row.expires_at.toISOString() })),
      next: rows.length > list.limit && last ? { scope: last.scope, key: last.key } : null,
    };
  });
}

/** The page statement: only the filters given, so the planner sees the real ones (one row more than the page, to know if there is a next). */
export function principalKeysStatement(list: KeyList): { text: string; values: unknown[] } {
  const conditions = ['principal_id = $1', 'expires_at > now()'];
  const values: unknown[] = [list.principalId];
  if (list.scope !== undefined) {
    values.push(list.scope);
    conditions.push(`scope = $${values.length}`);
  }
  if (list.state !== undefined) {
    values.push(list.state);
    conditions.push(`state = $${values.length}`);
  }
  if (list.after !== undefined) {
    values.push(list.after.scope, list.after.key);
    conditions.push(`(scope, key) > ($${values.length - 1}, $${values.length})`);
  }
  values.push(list.limit + 1);
  return {
    text: `SELECT scope, key, state, response_status, created_at, expires_at FROM idempotency_keys
           WHERE ${conditions.join(' AND ')} ORDER BY scope, key LIMIT $${values.length}`,
    values,
  };
}
