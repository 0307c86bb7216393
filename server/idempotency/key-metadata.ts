// What the dashboard may know about a stored key: metadata only. The columns are named one
// by one and response_body is never among them (the dashboard's database role could not
// read it anyway). A lookup is scoped to one principal and audited with its reason in the
// same transaction; a key under another principal and an absent key look exactly alike.
import { z } from 'zod';
import { storableText } from '../storable';
import { inTransaction, type Connectable } from '../../db/transaction';
import { writeAudit } from '../audit/log';
import { KEY_PATTERN } from '@retrysafe/store';
import type { Queryable } from '@retrysafe/store/postgres';
import { instantFromMicros, MICROS_PATTERN, microsOf } from '../keyset';
import { PRINCIPAL_CREATED_INDEX_PREDICATE } from '../../db/schema/idempotency-keys';
import { serviceNameSchema } from '../service-name';

export const keyLookupSchema = z.strictObject({
  principalId: z.uuid('must be a principal id (UUID)'),
  /** One service's record only; absent: every service's. */
  service: serviceNameSchema.optional(),
  key: z.string().regex(KEY_PATTERN, 'must be 1 to 255 visible ASCII characters'),
  reason: storableText().trim().min(3, 'say why you look this key up').max(500),
});
export type KeyLookup = z.infer<typeof keyLookupSchema>;

export interface KeyRecord {
  service: string;
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
  /** In progress past its lease: how long ago the lease ended, seconds (null otherwise). The attempt crashed or hung. */
  leasePassedSeconds: number | null;
  /** First 8 hex digits of the request fingerprint: enough to tell two requests apart, not to recompute one. */
  fingerprintPrefix: string;
  attempts: number;
  /** Takeovers of a crashed attempt: attempts after the first. */
  takeovers: number;
}

/** A key row's metadata columns as readKeyRecords and the correlation lookup select them (alias k). */
export interface KeyRecordRow {
  service: string;
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
  lease_passed_seconds: number | null;
  fingerprint_prefix: string;
  attempts: number;
}

/** The select list of KeyRecordRow, over idempotency_keys as k: never response_body. */
export const KEY_RECORD_COLUMNS = `k.service, k.scope, k.state, k.response_status, k.response_content_type, k.response_size,
                  CASE WHEN k.response_ref IS NOT NULL THEN 'reference' WHEN k.response_key_id IS NOT NULL THEN 'body' END AS stored_as,
                  k.correlation_id, k.created_at, k.completed_at, k.expires_at,
                  greatest(0, extract(epoch FROM k.expires_at - now()))::float8 AS seconds_left,
                  k.lease_expires_at,
                  CASE WHEN k.state = 'in_progress' AND k.lease_expires_at < now() THEN extract(epoch FROM now() - k.lease_expires_at)::float8 END AS lease_passed_seconds,
                  encode(substring(k.fingerprint FROM 1 FOR 4), 'hex') AS fingerprint_prefix, k.attempts`;

export function toKeyRecord(row: KeyRecordRow): KeyRecord {
  return {
    service: row.service,
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
    leasePassedSeconds: row.lease_passed_seconds,
    fingerprintPrefix: row.fingerprint_prefix,
    attempts: row.attempts,
    takeovers: Math.max(0, row.attempts - 1),
  };
}

/**
 * Every service's and scope's record of (principal, key), or one service's: one primary-key
 * probe per known (service, scope) (each policy's endpoint, or "intent" for an intent-scoped
 * one), so a principal with millions of keys costs the same.
 */
export async function readKeyRecords(db: Queryable, principalId: string, key: string, service?: string): Promise<KeyRecord[]> {
  const { rows } = await db.query<KeyRecordRow>({
    name: 'dashboard_key_records',
    text: `SELECT ${KEY_RECORD_COLUMNS}
           FROM (SELECT DISTINCT p.service, CASE WHEN p.scope_mode = 'intent' THEN 'intent' ELSE p.endpoint END AS scope
                 FROM endpoint_policies p WHERE $3::text IS NULL OR p.service = $3) s
           JOIN idempotency_keys k ON k.principal_id = $1 AND k.service = s.service AND k.scope = s.scope AND k.key = $2
           ORDER BY k.service, k.scope, k.expires_at DESC`,
    values: [principalId, key, service ?? null],
  });
  return rows.map(toKeyRecord);
}

/** A lookup by an operator: the records, with the audit row (who, why, what was asked) in the same transaction. */
export async function lookUpKey(pool: Connectable, lookup: KeyLookup, actor: string): Promise<KeyRecord[]> {
  return inTransaction(pool, async (db) => {
    const records = await readKeyRecords(db, lookup.principalId, lookup.key, lookup.service);
    await writeAudit(db, {
      actor,
      action: 'key.lookup',
      target: { principalId: lookup.principalId, ...(lookup.service ? { service: lookup.service } : {}), key: lookup.key },
      reason: lookup.reason,
      details: { records: records.length },
    });
    return records;
  });
}

export const staleClaimsQuery = z.strictObject({ limit: z.coerce.number().int().min(1).max(500).default(100) });

export const staleReleaseSchema = z.strictObject({
  principalId: z.uuid(),
  service: serviceNameSchema,
  scope: storableText().min(1).max(200),
  key: z.string().regex(KEY_PATTERN),
  reason: storableText().trim().min(3, 'say why you release this claim').max(500),
});

export interface StaleClaim {
  principalId: string;
  service: string;
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
  const { rows } = await db.query<{ principal_id: string; service: string; scope: string; key: string; created_at: Date; lease_expires_at: Date; past: number; attempts: number; correlation_id: string }>({
    name: 'dashboard_stale_claims',
    text: `SELECT principal_id, service, scope, key, created_at, lease_expires_at, extract(epoch FROM now() - lease_expires_at)::float8 AS past, attempts, correlation_id
           FROM idempotency_keys WHERE state = 'in_progress' AND lease_expires_at < now()
           ORDER BY lease_expires_at LIMIT $1`,
    values: [limit],
  });
  return rows.map((row) => ({
    principalId: row.principal_id,
    service: row.service,
    scope: row.scope,
    key: row.key,
    createdAt: row.created_at.toISOString(),
    leaseExpiredAt: row.lease_expires_at.toISOString(),
    pastLeaseSeconds: Math.round(row.past),
    attempts: row.attempts,
    correlationId: row.correlation_id,
  }));
}

/** Keys a page examines at most: bounds its work when matches (live, in the filters) are rare. */
export const KEY_LIST_SCAN_ROWS = 2000;

const keyCursorSchema = z.strictObject({
  /** created_at in whole microseconds since the epoch (exact; a Date would round to ms). */
  createdAtMicros: z.string().regex(MICROS_PATTERN, 'must be a cursor from a previous page'),
  service: serviceNameSchema,
  scope: storableText().min(1).max(200),
  key: storableText().min(1).max(255),
});
export type KeyCursor = z.infer<typeof keyCursorSchema>;

export const keyListSchema = z.strictObject({
  principalId: z.uuid('must be a principal id (UUID)'),
  reason: storableText().trim().min(3, 'say why you list these keys').max(500),
  service: serviceNameSchema.optional(),
  scope: storableText().min(1).max(200).optional(),
  state: z.enum(['in_progress', 'completed', 'failed']).optional(),
  /** Keyset cursor: where the previous page stopped (its last key, or the last key it examined). */
  after: keyCursorSchema.optional(),
  limit: z.number().int().min(1).max(200).default(50),
});
export type KeyList = z.infer<typeof keyListSchema>;

export interface KeySummary {
  service: string;
  scope: string;
  key: string;
  state: KeyRecord['state'];
  statusCode: number | null;
  createdAt: string;
  expiresAt: string;
}

export interface KeyPage {
  keys: KeySummary[];
  /** The cursor of the next page, or null when the principal has no older key. */
  next: KeyCursor | null;
  /**
   * Set when this page stopped at the scan bound before filling up (rare matches): every key
   * created after this instant was examined, and older ones may still match.
   */
  searchedBackTo: string | null;
}

/**
 * One principal's live keys, newest first, a page at a time: a backward range scan of
 * (principal_id, created_at) from the cursor, read only until the page is full, so a principal
 * with millions of keys costs one page. When matches are rare (a filter, or keys that expired
 * and await the sweeper), a page examines at most KEY_LIST_SCAN_ROWS keys and comes back short,
 * saying how far back it looked; the next page goes on from the last key examined. Listing
 * reveals key strings, so it takes a reason and is audited like a lookup.
 */
export async function listPrincipalKeys(pool: Connectable, list: KeyList, actor: string): Promise<KeyPage> {
  const statement = principalKeysStatement(list);
  return inTransaction(pool, async (db) => {
    const { rows } = await db.query<{
      service: string;
      scope: string;
      key: string;
      state: KeyRecord['state'];
      response_status: number | null;
      created_at: Date;
      created_micros: string;
      expires_at: Date;
      matches: boolean;
      at_bound: boolean;
    }>(statement);
    const matches = rows.filter((row) => row.matches);
    const page = matches.slice(0, list.limit);
    const cursorOf = (row: { service: string; scope: string; key: string; created_micros: string }): KeyCursor => ({
      createdAtMicros: row.created_micros,
      service: row.service,
      scope: row.scope,
      key: row.key,
    });
    const last = page.at(-1);
    // The last key examined, when the scan stopped at its bound (there may be more after it).
    const bound = rows.find((row) => row.at_bound);
    let next: KeyCursor | null = null;
    let searchedBackTo: string | null = null;
    if (matches.length > list.limit && last) next = cursorOf(last);
    else if (bound) {
      next = cursorOf(bound);
      if (page.length < list.limit) searchedBackTo = bound.created_at.toISOString();
    }
    await writeAudit(db, {
      actor,
      action: 'key.list',
      target: { principalId: list.principalId },
      reason: list.reason,
      details: { service: list.service ?? null, scope: list.scope ?? null, state: list.state ?? null, after: list.after ?? null, keys: page.length },
    });
    return {
      keys: page.map((row) => ({ service: row.service, scope: row.scope, key: row.key, state: row.state, statusCode: row.response_status, createdAt: row.created_at.toISOString(), expiresAt: row.expires_at.toISOString() })),
      next,
      searchedBackTo,
    };
  });
}

/**
 * The page statement, one pass in index order: the scan walks (principal_id, created_at)
 * backwards from the cursor, at most KEY_LIST_SCAN_ROWS keys, numbering them as they come; the
 * outer query keeps the matches (live, and the filters given, so the planner sees the real
 * ones) and the key at the bound, and stops at one match more than the page (to know if there
 * is a next). Nothing sorts or counts the scan as a whole, so a full page reads only as far as
 * its last match.
 */
export function principalKeysStatement(list: KeyList): { text: string; values: unknown[] } {
  const values: unknown[] = [list.principalId];
  // The index's predicate, stated so the planner may use it (db/schema/idempotency-keys.ts).
  const scan = ['principal_id = $1', PRINCIPAL_CREATED_INDEX_PREDICATE];
  if (list.after !== undefined) {
    values.push(list.after.createdAtMicros, list.after.service, list.after.scope, list.after.key);
    const n = values.length;
    scan.push(`(created_at, service, scope, key) < (${instantFromMicros(`$${n - 3}`)}, $${n - 2}::text, $${n - 1}::text, $${n}::text)`);
  }
  const filters = ['expires_at > now()'];
  if (list.service !== undefined) {
    values.push(list.service);
    filters.push(`service = $${values.length}`);
  }
  if (list.scope !== undefined) {
    values.push(list.scope);
    filters.push(`scope = $${values.length}`);
  }
  if (list.state !== undefined) {
    values.push(list.state);
    filters.push(`state = $${values.length}`);
  }
  values.push(KEY_LIST_SCAN_ROWS, list.limit + 1);
  const bound = `$${values.length - 1}`;
  const order = 'created_at DESC, service DESC, scope DESC, key DESC';
  return {
    text: `SELECT service, scope, key, state, response_status, created_at, created_micros, expires_at, matches, n = ${bound} AS at_bound
           FROM (
             SELECT *, ${filters.join(' AND ')} AS matches, row_number() OVER (ORDER BY ${order}) AS n
             FROM (
               SELECT service, scope, key, state, response_status, created_at, ${microsOf('created_at')} AS created_micros, expires_at
               FROM idempotency_keys
               WHERE ${scan.join(' AND ')}
               ORDER BY ${order} LIMIT ${bound}
             ) scanned
           ) numbered
           WHERE matches OR n = ${bound}
           ORDER BY ${order} LIMIT $${values.length}`,
    values,
  };
}
