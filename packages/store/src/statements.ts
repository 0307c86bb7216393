// Every SQL statement of the store's request path, each in one named function with the
// index that serves it. All are named (prepared once per connection) statements: the
// plain query builder costs about twice the CPU per call. Times come from the database
// clock (now()), never the application's, so instances with skewed clocks agree.
import type pg from 'pg';

/**
 * Session settings of the connections the store's statements run on (the store's pool; pass
 * them as the pg `options` connection parameter). Every statement here is written so that the
 * primary key is the only index it can be planned on (drizzle/idempotency-keys.ts: each
 * secondary index is partial on a predicate these statements never state). What remains is a
 * sequential scan, which the planner picks when it believes the table, or a day partition, is
 * empty or a page or two: right for that moment, but a named statement's generic plan keeps it
 * while the table grows, until an ANALYZE (an empty future partition analyzed by a
 * database-wide ANALYZE would be scanned whole for every request of its day). With sequential
 * scans disabled the primary key wins whatever the statistics say; the plans are otherwise the
 * same, so it costs nothing (measured with pgbench). Proven by packages/store/test/integration/request-path-plans.
 */
export const STORE_SESSION_OPTIONS = '-c enable_seqscan=off';

/**
 * How the store's pool connects (spread into pg.Pool's config): the session settings above, and
 * pipelining, so that a transactional request's BEGIN and claim leave in one round trip
 * (store.ts). A pool without them works the same, with a round trip more per transactional
 * request and plans that rest on the statistics.
 */
export const STORE_POOL_SETTINGS = { options: STORE_SESSION_OPTIONS, pipeline: true } as const;

/**
 * A pooler in front of the database. `transaction`: PgBouncer's pool_mode = transaction (1.18
 * and later), which cannot carry a named statement from one server connection to the next, so
 * the store's statements go unnamed (parsed and planned at each execution).
 * `transaction-prepared`: the same pool mode on a pooler that tracks protocol-level prepared
 * statements (PgBouncer 1.21 and later with max_prepared_statements above 0, its default from
 * 1.24): the store keeps its named statements, prepared once per server connection.
 */
export type PoolerMode = 'transaction' | 'transaction-prepared';

/** Every PoolerMode, as DATABASE_POOLER spells it. */
export const POOLER_MODES: readonly PoolerMode[] = ['transaction', 'transaction-prepared'];

/**
 * How the store's pool connects through a transaction-mode pooler: no startup parameter the
 * pooler would have to know (PgBouncer refuses `options` unless told to ignore it, and would
 * not carry it to every server connection anyway). Pipelining stays: the store pipelines only
 * inside its own transactions (BEGIN ... COMMIT), where the pooler keeps one server connection
 * for the client, never two autocommit statements at once.
 */
export const STORE_POOLER_POOL_SETTINGS = { pipeline: true } as const;

/** The pool settings for the store's own pool, direct or through a pooler. */
export function storePoolSettings(pooler?: PoolerMode): typeof STORE_POOL_SETTINGS | typeof STORE_POOLER_POOL_SETTINGS {
  return pooler ? STORE_POOLER_POOL_SETTINGS : STORE_POOL_SETTINGS;
}

/**
 * Through a transaction-mode pooler the session settings above cannot be relied on (each
 * transaction may get another server connection): the store sets them for each of its own
 * transactions instead, in the same simple query as the BEGIN (no round trip of its own). The
 * store's statements are then unnamed (planned with their values at each execution, never a
 * generic plan), and those outside a transaction of the request run in a transaction of their
 * own that opens with this (backend.ts). Proven by packages/store/test/integration/request-path-plans.
 */
export const POOLER_TRANSACTION_SETTINGS = 'SET LOCAL enable_seqscan = off';

export type Queryable = Pick<pg.ClientBase, 'query'>;

export interface KeyIdentity {
  principalId: string;
  /** The service that owns the key (createRetrysafe's `service`). */
  service: string;
  scope: string;
  key: string;
}

export interface ClaimValues extends KeyIdentity {
  fingerprint: Buffer;
  correlationId: string;
  leaseMs: number;
  retentionMs: number;
}

/** The existing row, as the claim or a read found it. */
export interface ExistingKey {
  state: 'in_progress' | 'completed' | 'failed';
  fingerprint: Buffer;
  correlationId: string;
  attempts: number;
  expired: boolean;
  leaseExpired: boolean;
  /** Seconds until the lease ends (0 when none or past). */
  leaseRemainingSeconds: number;
  responseStatus: number | null;
  responseContentType: string | null;
  responseBody: Buffer | null;
  responseKeyId: string | null;
  responseRef: string | null;
}

export type ClaimResult = { claimed: true; attempts: number } | { claimed: false; existing: ExistingKey | null };

interface ExistingRow {
  state: ExistingKey['state'];
  fingerprint: Buffer;
  correlation_id: string;
  attempts: number;
  expired: boolean;
  lease_expired: boolean;
  lease_remaining: number;
  response_status: number | null;
  response_content_type: string | null;
  response_body: Buffer | null;
  response_key_id: string | null;
  response_ref: string | null;
}

// Column order matters: the claim's UNION ALL matches its branches by position.
const EXISTING_COLUMNS = `
  k.attempts, k.state, k.fingerprint, k.correlation_id,
  k.expires_at <= now() AS expired,
  coalesce(k.lease_expires_at <= now(), false) AS lease_expired,
  coalesce(ceil(greatest(extract(epoch FROM k.lease_expires_at - now()), 0)), 0)::int AS lease_remaining,
  k.response_status, k.response_content_type, k.response_body, k.response_key_id, k.response_ref`;

const CLAIM_SQL = `
WITH claimed AS (
  INSERT INTO retrysafe.idempotency_keys
    (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
  VALUES ($1, $8, $2, $3, 'in_progress', $4, $5,
          now() + $6::bigint * interval '1 millisecond',
          now() + $7::bigint * interval '1 millisecond')
  ON CONFLICT (principal_id, service, scope, key) DO NOTHING
  RETURNING attempts
)
SELECT true AS claimed, attempts, NULL::text AS state, NULL::bytea AS fingerprint, NULL::uuid AS correlation_id,
       NULL::boolean AS expired, NULL::boolean AS lease_expired, NULL::int AS lease_remaining,
       NULL::smallint AS response_status, NULL::text AS response_content_type, NULL::bytea AS response_body,
       NULL::text AS response_key_id, NULL::text AS response_ref
FROM claimed
UNION ALL
SELECT false AS claimed, ${EXISTING_COLUMNS}
FROM retrysafe.idempotency_keys k
WHERE k.principal_id = $1 AND k.service = $8 AND k.scope = $2 AND k.key = $3 AND NOT EXISTS (SELECT 1 FROM claimed)`;

const READ_KEY_SQL = `SELECT ${EXISTING_COLUMNS} FROM retrysafe.idempotency_keys k WHERE k.principal_id = $1 AND k.service = $4 AND k.scope = $2 AND k.key = $3`;

const TAKE_OVER_SQL = `
UPDATE retrysafe.idempotency_keys SET
  state = 'in_progress', fingerprint = $4, correlation_id = $5, attempts = attempts + 1,
  lease_expires_at = now() + $6::bigint * interval '1 millisecond',
  created_at = CASE WHEN expires_at <= now() THEN now() ELSE created_at END,
  expires_at = CASE WHEN expires_at <= now() THEN now() + $7::bigint * interval '1 millisecond' ELSE expires_at END,
  completed_at = NULL, response_status = NULL, response_content_type = NULL, response_body = NULL,
  response_key_id = NULL, response_size = NULL, response_ref = NULL
WHERE principal_id = $1 AND service = $9 AND scope = $2 AND key = $3 AND attempts = $8
  AND (expires_at <= now() OR state = 'failed' OR (state = 'in_progress' AND lease_expires_at <= now()))
RETURNING attempts`;

const COMPLETE_SQL = `
UPDATE retrysafe.idempotency_keys SET
  state = 'completed', completed_at = now(), lease_expires_at = NULL,
  response_status = $5, response_content_type = $6, response_body = $7, response_key_id = $8,
  response_size = $9, response_ref = $10
WHERE principal_id = $1 AND service = $11 AND scope = $2 AND key = $3 AND attempts = $4 AND state = 'in_progress'`;

const FAIL_SQL = `
UPDATE retrysafe.idempotency_keys SET state = 'failed', lease_expires_at = NULL
WHERE principal_id = $1 AND service = $5 AND scope = $2 AND key = $3 AND attempts = $4 AND state = 'in_progress'`;

/** The statement texts, for the tests that prove their plans. */
export const storeStatementTexts = { claim: CLAIM_SQL, readKey: READ_KEY_SQL, takeOver: TAKE_OVER_SQL, complete: COMPLETE_SQL, fail: FAIL_SQL };

function toExisting(row: ExistingRow): ExistingKey {
  return {
    state: row.state,
    fingerprint: row.fingerprint,
    correlationId: row.correlation_id,
    attempts: row.attempts,
    expired: row.expired,
    leaseExpired: row.lease_expired,
    leaseRemainingSeconds: row.lease_remaining,
    responseStatus: row.response_status,
    responseContentType: row.response_content_type,
    responseBody: row.response_body,
    responseKeyId: row.response_key_id,
    responseRef: row.response_ref,
  };
}

/**
 * The claim: INSERT ... ON CONFLICT DO NOTHING RETURNING on the primary key
 * (principal_id, service, scope, key), which arbitrates concurrent claims. The second branch reads
 * the conflicting row in the same round trip; it runs only when the insert returned
 * nothing, and sees the row when it was committed before this statement began (a replay,
 * the common case). When the insert had to wait for a concurrent claimant, the row is
 * not in this statement's snapshot and `existing` is null: the caller reads it afresh.
 */
export async function claimKey(db: Queryable, claim: ClaimValues): Promise<ClaimResult> {
  const result = await db.query<ExistingRow & { claimed: boolean }>({
    name: 'retrysafe_claim',
    text: CLAIM_SQL,
    values: [claim.principalId, claim.scope, claim.key, claim.fingerprint, claim.correlationId, Math.round(claim.leaseMs), Math.round(claim.retentionMs), claim.service],
  });
  const row = result.rows[0];
  if (!row) return { claimed: false, existing: null };
  if (row.claimed) return { claimed: true, attempts: row.attempts };
  return { claimed: false, existing: toExisting(row) };
}

/** Reads one scoped key (primary key lookup). */
export async function readKey(db: Queryable, id: KeyIdentity): Promise<ExistingKey | null> {
  const result = await db.query<ExistingRow>({
    name: 'retrysafe_read_key',
    text: READ_KEY_SQL,
    values: [id.principalId, id.scope, id.key, id.service],
  });
  const row = result.rows[0];
  return row ? toExisting(row) : null;
}

/**
 * Takes over a key whose attempt crashed (lease past), failed retryably, or expired but
 * is not yet swept. Conditional on the attempt number the caller saw, so of many
 * concurrent takers exactly one gets a row back. An expired key starts a new life: new
 * creation time and expiry from the policy in force now. Primary key lookup.
 */
export async function takeOverKey(db: Queryable, claim: ClaimValues, seenAttempts: number): Promise<number | null> {
  const result = await db.query<{ attempts: number }>({
    name: 'retrysafe_take_over',
    text: TAKE_OVER_SQL,
    values: [claim.principalId, claim.scope, claim.key, claim.fingerprint, claim.correlationId, Math.round(claim.leaseMs), Math.round(claim.retentionMs), seenAttempts, claim.service],
  });
  return result.rows[0]?.attempts ?? null;
}

export interface CompletionValues extends KeyIdentity {
  attempts: number;
  /**
   * The claim's correlation id. Postgres and MySQL fence by the attempt number alone (one history
   * of the row); Redis fences by both, since a failover can leave two records of one key with the
   * same attempt number (a stale master's and the promoted replica's).
   */
  correlationId?: string;
  status: number;
  contentType: string;
  body: Buffer | null;
  keyId: string | null;
  size: number;
  reference: string | null;
}

/**
 * Records the response, if this attempt still holds the claim (fenced by attempts).
 * Returns false when a takeover superseded it. Primary key lookup.
 */
export async function completeKey(db: Queryable, values: CompletionValues): Promise<boolean> {
  const result = await db.query({
    name: 'retrysafe_complete',
    text: COMPLETE_SQL,
    values: [values.principalId, values.scope, values.key, values.attempts, values.status, values.contentType, values.body, values.keyId, values.size, values.reference, values.service],
  });
  return result.rowCount === 1;
}

/** Marks this attempt failed and retryable (a 5xx or a crash of the work). Primary key lookup. */
export async function failKey(db: Queryable, id: KeyIdentity, attempts: number): Promise<boolean> {
  const result = await db.query({
    name: 'retrysafe_fail',
    text: FAIL_SQL,
    values: [id.principalId, id.scope, id.key, attempts, id.service],
  });
  return result.rowCount === 1;
}

// The partitioned layout (db/migrations/0004): keys partitioned by expires_at day. The
// claim is the server-side function retrysafe_claim_partitioned (advisory lock on the
// scoped key, probe of the live partitions, insert). Every other statement addresses the
// key's live row (expires_at > now(), which also prunes the partitions): an expired row
// is past its promise and stays behind until its partition is dropped, so a key that is
// used again after expiry is inserted anew rather than taken over.

const PARTITIONED_CLAIM_SQL = `SELECT * FROM retrysafe.retrysafe_claim_partitioned($1, $8, $2, $3, $4, $5, $6, $7)`;

const PARTITIONED_READ_KEY_SQL = `SELECT ${EXISTING_COLUMNS} FROM retrysafe.idempotency_keys k
WHERE k.principal_id = $1 AND k.service = $4 AND k.scope = $2 AND k.key = $3 AND k.expires_at > now()
ORDER BY k.expires_at DESC LIMIT 1`;

const PARTITIONED_TAKE_OVER_SQL = `
UPDATE retrysafe.idempotency_keys SET
  state = 'in_progress', fingerprint = $4, correlation_id = $5, attempts = attempts + 1,
  lease_expires_at = now() + $6::bigint * interval '1 millisecond',
  completed_at = NULL, response_status = NULL, response_content_type = NULL, response_body = NULL,
  response_key_id = NULL, response_size = NULL, response_ref = NULL
WHERE principal_id = $1 AND service = $8 AND scope = $2 AND key = $3 AND attempts = $7 AND expires_at > now()
  AND (state = 'failed' OR (state = 'in_progress' AND lease_expires_at <= now()))
RETURNING attempts`;

const PARTITIONED_COMPLETE_SQL = `${COMPLETE_SQL} AND expires_at > now()`;
const PARTITIONED_FAIL_SQL = `${FAIL_SQL} AND expires_at > now()`;

export const partitionedStatementTexts = {
  claim: PARTITIONED_CLAIM_SQL,
  readKey: PARTITIONED_READ_KEY_SQL,
  takeOver: PARTITIONED_TAKE_OVER_SQL,
  complete: PARTITIONED_COMPLETE_SQL,
  fail: PARTITIONED_FAIL_SQL,
};

/** The store's statements for one layout. */
export interface StoreStatements {
  claim(db: Queryable, claim: ClaimValues): Promise<ClaimResult>;
  read(db: Queryable, id: KeyIdentity): Promise<ExistingKey | null>;
  takeOver(db: Queryable, claim: ClaimValues, seenAttempts: number): Promise<number | null>;
  complete(db: Queryable, values: CompletionValues): Promise<boolean>;
  fail(db: Queryable, id: KeyIdentity, attempts: number): Promise<boolean>;
}

export const plainStatements: StoreStatements = {
  claim: claimKey,
  read: readKey,
  takeOver: takeOverKey,
  complete: completeKey,
  fail: failKey,
};

export const partitionedStatements: StoreStatements = {
  async claim(db, claim) {
    const result = await db.query<ExistingRow & { claimed: boolean }>({
      name: 'retrysafe_claim_partitioned',
      text: PARTITIONED_CLAIM_SQL,
      values: [claim.principalId, claim.scope, claim.key, claim.fingerprint, claim.correlationId, Math.round(claim.leaseMs), Math.round(claim.retentionMs), claim.service],
    });
    const row = result.rows[0];
    if (!row) throw new Error('retrysafe_claim_partitioned returned no row');
    if (row.claimed) return { claimed: true, attempts: row.attempts };
    return { claimed: false, existing: toExisting(row) };
  },
  async read(db, id) {
    const result = await db.query<ExistingRow>({
      name: 'retrysafe_read_key_partitioned',
      text: PARTITIONED_READ_KEY_SQL,
      values: [id.principalId, id.scope, id.key, id.service],
    });
    const row = result.rows[0];
    return row ? toExisting(row) : null;
  },
  async takeOver(db, claim, seenAttempts) {
    const result = await db.query<{ attempts: number }>({
      name: 'retrysafe_take_over_partitioned',
      text: PARTITIONED_TAKE_OVER_SQL,
      values: [claim.principalId, claim.scope, claim.key, claim.fingerprint, claim.correlationId, Math.round(claim.leaseMs), seenAttempts, claim.service],
    });
    return result.rows[0]?.attempts ?? null;
  },
  async complete(db, values) {
    const result = await db.query({
      name: 'retrysafe_complete_partitioned',
      text: PARTITIONED_COMPLETE_SQL,
      values: [values.principalId, values.scope, values.key, values.attempts, values.status, values.contentType, values.body, values.keyId, values.size, values.reference, values.service],
    });
    return result.rowCount === 1;
  },
  async fail(db, id, attempts) {
    const result = await db.query({
      name: 'retrysafe_fail_partitioned',
      text: PARTITIONED_FAIL_SQL,
      values: [id.principalId, id.scope, id.key, attempts, id.service],
    });
    return result.rowCount === 1;
  },
};

/**
 * The statements with no name: what a transaction-mode pooler before PgBouncer 1.21 accepts
 * (a named statement is prepared on one server connection and missing, or already there, on
 * the next). Each is sent as an unnamed extended-protocol statement (Parse, Bind, Execute,
 * Sync in one write): its values stay bound parameters.
 */
function unnamed(named: StoreStatements): StoreStatements {
  return {
    claim: (db, claim) => named.claim(withoutNames(db), claim),
    read: (db, id) => named.read(withoutNames(db), id),
    takeOver: (db, claim, seenAttempts) => named.takeOver(withoutNames(db), claim, seenAttempts),
    complete: (db, values) => named.complete(withoutNames(db), values),
    fail: (db, id, attempts) => named.fail(withoutNames(db), id, attempts),
  };
}

const unnamedQueryables = new WeakMap<object, Queryable>();

/** `db`, with the name taken off every query config sent through it. */
export function withoutNames<T extends Pick<pg.Pool, 'query'> | Queryable>(db: T): Pick<T, 'query'> {
  let wrapped = unnamedQueryables.get(db);
  if (!wrapped) {
    const query = (config: unknown, values?: unknown): unknown => {
      const send = typeof config === 'object' && config !== null && 'name' in config ? { ...(config as pg.QueryConfig), name: undefined } : config;
      return (db.query as (config: unknown, values?: unknown) => unknown).call(db, send, values);
    };
    wrapped = { query: query as Queryable['query'] };
    unnamedQueryables.set(db, wrapped);
  }
  return wrapped;
}

export const poolerPlainStatements: StoreStatements = unnamed(plainStatements);
export const poolerPartitionedStatements: StoreStatements = unnamed(partitionedStatements);

export function statementsFor(layout: 'plain' | 'partitioned', pooler?: PoolerMode): StoreStatements {
  if (pooler === 'transaction') return layout === 'partitioned' ? poolerPartitionedStatements : poolerPlainStatements;
  return layout === 'partitioned' ? partitionedStatements : plainStatements;
}
