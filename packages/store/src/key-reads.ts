// The dashboard's reads of key records, behind one interface: a key's metadata, a principal's
// keys a page at a time, the keys of a correlation id, the stale claims, and the release of
// one stale claim. Metadata only: a record holds text, numbers, flags and nulls, so a response
// body cannot ride along under any name (response bodies leave the store only as a replay to
// their own principal, through IdempotencyStore). Postgres is the first implementation
// (PostgresKeyReads, below), run on the dashboard's restricted role.
import type { IdempotencyBackend } from './backend.js';
import { CORRELATION_INDEX_PREDICATE, PRINCIPAL_CREATED_INDEX_PREDICATE } from './index-predicates.js';
import type { KeyIdentity, Queryable } from './statements.js';

/** What a record field may hold. No bytes, no nested object: a stored response cannot fit. */
export type MetadataValue = string | number | boolean | null;

/**
 * A record of key metadata. The index signature is the guarantee: an object with a Buffer (or
 * any object) in any field is not assignable to a record type, so no implementation of
 * KeyRecordReads can hand a response body to the dashboard, whatever it calls the field.
 */
export interface KeyMetadata {
  readonly [field: string]: MetadataValue;
}

export type KeyState = 'in_progress' | 'completed' | 'failed';

export interface KeyRecord extends KeyMetadata {
  service: string;
  scope: string;
  state: KeyState;
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

export interface CorrelationRecord extends KeyRecord {
  principalId: string;
  /** The principal's display name, null when it has none. */
  principalName: string | null;
  key: string;
}

export interface StaleClaim extends KeyMetadata {
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

export interface KeySummary extends KeyMetadata {
  service: string;
  scope: string;
  key: string;
  state: KeyState;
  statusCode: number | null;
  createdAt: string;
  expiresAt: string;
}

/** Where a page of a principal's keys stopped: its last key, or the last key it examined. */
export interface KeyCursor extends KeyMetadata {
  /** created_at in whole microseconds since the epoch, as decimal digits (exact; a Date would round to ms). */
  createdAtMicros: string;
  service: string;
  scope: string;
  key: string;
}

export interface KeyListQuery {
  principalId: string;
  service?: string | undefined;
  scope?: string | undefined;
  state?: KeyState | undefined;
  /** The previous page's `next`. */
  after?: KeyCursor | undefined;
  limit: number;
}

export interface KeyPage {
  keys: KeySummary[];
  /** The cursor of the next page, or null when the principal has no older key. */
  next: KeyCursor | null;
  /**
   * Set when this page stopped at the backend's scan bound before filling up (rare matches):
   * every key created after this instant was examined, and older ones may still match.
   */
  searchedBackTo: string | null;
}

export interface KeyLookupQuery {
  principalId: string;
  key: string;
  /** One service's records only; absent: every service's. */
  service?: string | undefined;
}

/** Who releases a stale claim and why (the audit record's actor and reason). */
export interface StaleClaimReleaser {
  actor: string;
  reason: string;
}

export type StaleClaimRelease =
  | { released: false }
  | {
      released: true;
      /**
       * The backend recorded the release in an audit log itself, atomically with it. The
       * package's backends never do (false: the caller audits; the Retrysafe server releases a
       * Postgres-kept claim through its own function, which writes its audit row in the release's
       * transaction). Kept for backends of others that keep an audit log of their own.
       */
      audited: boolean;
    };

/**
 * The dashboard's reads of key records (and its one write to them, the release of a stale
 * claim). Every method is scoped the way the dashboard's access rules need: a key lookup and a
 * key list name their principal, and a key of another principal is exactly as absent as a key
 * never used. Nothing here returns a response body or the full fingerprint.
 *
 * Not part of this seam: the monitoring series (flow_counts_*, claim_latency_*,
 * principal_flow_*, store_stats*), catalog statistics and the retention sweeps stay Postgres
 * monitoring and maintenance of the Postgres backend.
 */
export interface KeyRecordReads {
  /**
   * Every record of (principal, key): one per service and scope the store knows (each endpoint
   * policy's scope, and each route's own policy's as its code declares it), or of one service; ordered by service, scope, then latest expiry first.
   */
  keyRecords(query: KeyLookupQuery): Promise<KeyRecord[]>;
  /**
   * One principal's live keys (not yet expired), newest first (created, then service, scope
   * and key, descending), at most `limit`, after the cursor. A backend may bound how many keys
   * a page examines: a page cut short says so in `searchedBackTo`, and `next` goes on from there.
   */
  principalKeys(query: KeyListQuery): Promise<KeyPage>;
  /** The keys whose claim had this correlation id (a replay and a takeover keep it), newest first, at most 20. */
  correlationRecords(correlationId: string): Promise<CorrelationRecord[]>;
  /** In-progress claims past their lease, oldest lease first: of every service, or of `service`. */
  staleClaims(limit: number, service?: string): Promise<StaleClaim[]>;
  /**
   * Marks the key failed and retryable if it is in progress past its lease (a retry may then
   * run it again); released: false when it is not (absent, another principal's, running or
   * finished). Refuses a blank reason.
   */
  releaseStaleClaim(id: KeyIdentity, by: StaleClaimReleaser): Promise<StaleClaimRelease>;
}

/**
 * A backend cannot answer this dashboard read or write (e.g. the release of a stale claim kept in
 * Redis or MySQL, where the dashboard holds no write): the dashboard says so instead of an answer
 * that would read as "none" or "done".
 */
export class KeyReadUnsupportedError extends Error {
  readonly code = 'KEY_READ_UNSUPPORTED';
  constructor(what: string) {
    super(what);
    this.name = 'KeyReadUnsupportedError';
  }
}

/**
 * A backend of the whole store: the request path (IdempotencyBackend) and the dashboard's reads.
 * Postgres provides the two as separate objects on purpose, PostgresBackend on the store's pool
 * and PostgresKeyReads on the dashboard's restricted role, which cannot read a response body;
 * another backend may implement both in one.
 */
export interface StoreBackend extends IdempotencyBackend, KeyRecordReads {}

// Index predicates (index-predicates.ts, whence the server's tables take them too): each
// secondary index is partial on a predicate only its dashboard statements state, so no
// request-path statement is ever planned on it. The plan tests (test/integration/plans.test.ts) prove it.

/** Keys a page of principalKeys examines at most: bounds its work when matches (live, in the filters) are rare. */
export const KEY_LIST_SCAN_ROWS = 2000;

/** Rows with one correlation id are at most a handful; this caps a pathological store. */
const MAX_CORRELATION_RECORDS = 20;

/** SQL reading `column` (a timestamptz) as whole microseconds since the epoch, as text. */
const microsOf = (column: string) => `(extract(epoch FROM ${column}) * 1000000)::bigint::text`;
/** SQL turning the parameter `placeholder` (whole microseconds) back into the exact timestamptz. */
const instantFromMicros = (placeholder: string) => `(timestamptz 'epoch' + ${placeholder}::bigint * interval '1 microsecond')`;

/** A key row's metadata columns as the lookups select them (alias k). */
interface KeyRecordRow {
  service: string;
  scope: string;
  state: KeyState;
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

/** The select list of KeyRecordRow, over retrysafe.idempotency_keys as k: never response_body. */
const KEY_RECORD_COLUMNS = `k.service, k.scope, k.state, k.response_status, k.response_content_type, k.response_size,
                  CASE WHEN k.response_ref IS NOT NULL THEN 'reference' WHEN k.response_key_id IS NOT NULL THEN 'body' END AS stored_as,
                  k.correlation_id, k.created_at, k.completed_at, k.expires_at,
                  greatest(0, extract(epoch FROM k.expires_at - now()))::float8 AS seconds_left,
                  k.lease_expires_at,
                  CASE WHEN k.state = 'in_progress' AND k.lease_expires_at < now() THEN extract(epoch FROM now() - k.lease_expires_at)::float8 END AS lease_passed_seconds,
                  encode(substring(k.fingerprint FROM 1 FOR 4), 'hex') AS fingerprint_prefix, k.attempts`;

function toKeyRecord(row: KeyRecordRow): KeyRecord {
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
 * A key lookup: one primary-key probe per known (service, scope) (each policy's endpoint, or
 * "intent" for an intent-scoped one), so a principal with millions of keys costs the same. The
 * scopes are the published policies' and those of the routes' own policies as their code declares
 * them (endpoint_policy_declarations), which differ when an admin changed the scope mode the code
 * still stores keys under.
 */
const KEY_RECORDS_SQL = `SELECT ${KEY_RECORD_COLUMNS}
           FROM (SELECT p.service, CASE WHEN p.scope_mode = 'intent' THEN 'intent' ELSE p.endpoint END AS scope
                 FROM retrysafe.endpoint_policies p WHERE $3::text IS NULL OR p.service = $3
                 UNION
                 SELECT d.service, CASE WHEN d.scope_mode = 'intent' THEN 'intent' ELSE d.endpoint END AS scope
                 FROM retrysafe.endpoint_policy_declarations d WHERE $3::text IS NULL OR d.service = $3) s
           JOIN retrysafe.idempotency_keys k ON k.principal_id = $1 AND k.service = s.service AND k.scope = s.scope AND k.key = $2
           ORDER BY k.service, k.scope, k.expires_at DESC`;

/**
 * The keys of a correlation id: a range of idempotency_keys_correlation_idx (its predicate
 * stated so the planner may use it), then each row's principal name by the principal_names
 * primary key.
 */
const CORRELATION_RECORDS_SQL = `SELECT k.principal_id, n.name AS principal_name, k.key, ${KEY_RECORD_COLUMNS}
           FROM retrysafe.idempotency_keys k
           LEFT JOIN retrysafe.principal_names n ON n.principal_id = k.principal_id
           WHERE k.correlation_id = $1::uuid AND k.${CORRELATION_INDEX_PREDICATE}
           ORDER BY k.created_at DESC LIMIT ${MAX_CORRELATION_RECORDS}`;

/** Stale claims, oldest lease first: a range scan of the partial index idempotency_keys_stale_lease_idx. */
const STALE_CLAIMS_SQL = `SELECT principal_id, service, scope, key, created_at, lease_expires_at, extract(epoch FROM now() - lease_expires_at)::float8 AS past, attempts, correlation_id
           FROM retrysafe.idempotency_keys WHERE state = 'in_progress' AND lease_expires_at < now() AND ($2::text IS NULL OR service = $2)
           ORDER BY lease_expires_at LIMIT $1`;

/**
 * The release of one stale claim: the SECURITY DEFINER function of migrations 0009, 0016 and
 * 0029, so a role that cannot write the store may release (given EXECUTE); it updates the row
 * (primary key lookup) and writes no audit row (since 0029: the audit log is not the store's).
 */
const RELEASE_STALE_CLAIM_SQL = 'SELECT retrysafe.retrysafe_release_stale_claim($1, $2, $3, $4, $5, $6) AS released';

/** The statement texts, for the tests that prove their plans (principalKeysStatement builds the key list's). */
export const keyReadStatementTexts = {
  keyRecords: KEY_RECORDS_SQL,
  correlationRecords: CORRELATION_RECORDS_SQL,
  staleClaims: STALE_CLAIMS_SQL,
  releaseStaleClaim: RELEASE_STALE_CLAIM_SQL,
};

/**
 * The key list's statement, one pass in index order: the scan walks
 * idempotency_keys_principal_created_idx, (principal_id, created_at), backwards from the cursor,
 * at most KEY_LIST_SCAN_ROWS keys, numbering them as they come; the outer query keeps the
 * matches (live, and the filters given, so the planner sees the real ones) and the key at the
 * bound, and stops at one match more than the page (to know if there is a next). Nothing sorts
 * or counts the scan as a whole, so a full page reads only as far as its last match. Unnamed,
 * so Postgres plans it with this principal's own statistics on every call.
 */
export function principalKeysStatement(query: KeyListQuery): { text: string; values: unknown[] } {
  const values: unknown[] = [query.principalId];
  // The index's predicate, stated so the planner may use it.
  const scan = ['principal_id = $1', PRINCIPAL_CREATED_INDEX_PREDICATE];
  if (query.after !== undefined) {
    values.push(query.after.createdAtMicros, query.after.service, query.after.scope, query.after.key);
    const n = values.length;
    scan.push(`(created_at, service, scope, key) < (${instantFromMicros(`$${n - 3}`)}, $${n - 2}::text, $${n - 1}::text, $${n}::text)`);
  }
  const filters = ['expires_at > now()'];
  if (query.service !== undefined) {
    values.push(query.service);
    filters.push(`service = $${values.length}`);
  }
  if (query.scope !== undefined) {
    values.push(query.scope);
    filters.push(`scope = $${values.length}`);
  }
  if (query.state !== undefined) {
    values.push(query.state);
    filters.push(`state = $${values.length}`);
  }
  values.push(KEY_LIST_SCAN_ROWS, query.limit + 1);
  const bound = `$${values.length - 1}`;
  const order = 'created_at DESC, service DESC, scope DESC, key DESC';
  return {
    text: `SELECT service, scope, key, state, response_status, created_at, created_micros, expires_at, matches, n = ${bound} AS at_bound
           FROM (
             SELECT *, ${filters.join(' AND ')} AS matches, row_number() OVER (ORDER BY ${order}) AS n
             FROM (
               SELECT service, scope, key, state, response_status, created_at, ${microsOf('created_at')} AS created_micros, expires_at
               FROM retrysafe.idempotency_keys
               WHERE ${scan.join(' AND ')}
               ORDER BY ${order} LIMIT ${bound}
             ) scanned
           ) numbered
           WHERE matches OR n = ${bound}
           ORDER BY ${order} LIMIT $${values.length}`,
    values,
  };
}

interface KeyListRow {
  service: string;
  scope: string;
  key: string;
  state: KeyState;
  response_status: number | null;
  created_at: Date;
  created_micros: string;
  expires_at: Date;
  matches: boolean;
  at_bound: boolean;
}

const cursorOf = (row: KeyListRow): KeyCursor => ({ createdAtMicros: row.created_micros, service: row.service, scope: row.scope, key: row.key });

/**
 * Postgres: the statements above, on the connections they are given (the dashboard's pool, whose
 * role has SELECT on every key column but response_body and EXECUTE on the release function:
 * db/dashboard-access.ts). They name the retrysafe schema and need no search_path.
 */
export class PostgresKeyReads implements KeyRecordReads {
  constructor(private readonly db: Queryable) {}

  async keyRecords(query: KeyLookupQuery): Promise<KeyRecord[]> {
    const { rows } = await this.db.query<KeyRecordRow>({
      name: 'retrysafe_dashboard_key_records',
      text: KEY_RECORDS_SQL,
      values: [query.principalId, query.key, query.service ?? null],
    });
    return rows.map(toKeyRecord);
  }

  async principalKeys(query: KeyListQuery): Promise<KeyPage> {
    const { rows } = await this.db.query<KeyListRow>(principalKeysStatement(query));
    const matches = rows.filter((row) => row.matches);
    const page = matches.slice(0, query.limit);
    const last = page.at(-1);
    // The last key examined, when the scan stopped at its bound (there may be more after it).
    const bound = rows.find((row) => row.at_bound);
    let next: KeyCursor | null = null;
    let searchedBackTo: string | null = null;
    if (matches.length > query.limit && last) next = cursorOf(last);
    else if (bound) {
      next = cursorOf(bound);
      if (page.length < query.limit) searchedBackTo = bound.created_at.toISOString();
    }
    return {
      keys: page.map((row) => ({ service: row.service, scope: row.scope, key: row.key, state: row.state, statusCode: row.response_status, createdAt: row.created_at.toISOString(), expiresAt: row.expires_at.toISOString() })),
      next,
      searchedBackTo,
    };
  }

  async correlationRecords(correlationId: string): Promise<CorrelationRecord[]> {
    const { rows } = await this.db.query<KeyRecordRow & { principal_id: string; principal_name: string | null; key: string }>({
      name: 'retrysafe_dashboard_correlation_records',
      text: CORRELATION_RECORDS_SQL,
      values: [correlationId],
    });
    return rows.map((row) => ({ principalId: row.principal_id, principalName: row.principal_name, key: row.key, ...toKeyRecord(row) }));
  }

  async staleClaims(limit: number, service?: string): Promise<StaleClaim[]> {
    const { rows } = await this.db.query<{ principal_id: string; service: string; scope: string; key: string; created_at: Date; lease_expires_at: Date; past: number; attempts: number; correlation_id: string }>({
      name: 'retrysafe_dashboard_stale_claims',
      text: STALE_CLAIMS_SQL,
      values: [limit, service ?? null],
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

  async releaseStaleClaim(id: KeyIdentity, by: StaleClaimReleaser): Promise<StaleClaimRelease> {
    const { rows } = await this.db.query<{ released: boolean }>({
      name: 'retrysafe_dashboard_release_stale_claim',
      text: RELEASE_STALE_CLAIM_SQL,
      values: [id.principalId, id.service, id.scope, id.key, by.actor, by.reason],
    });
    return rows[0]?.released === true ? { released: true, audited: false } : { released: false };
  }
}
