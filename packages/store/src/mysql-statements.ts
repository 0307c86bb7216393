// Every SQL statement of the MySQL/MariaDB backend's request path, each in one named function
// with the index that serves it (all the primary key). Sent with mysql2's execute(): a server-side
// prepared statement, prepared once per connection and cached there. Times come from the
// server's UTC_TIMESTAMP(6) (constant within a statement), never the application's clock.
import type { Connection, ResultSetHeader, RowDataPacket } from 'mysql2/promise';
import type { ClaimResult, ClaimValues, CompletionValues, ExistingKey, KeyIdentity } from './statements.js';

/** What the MySQL backend's statements run on, and what an endpoint's work gets as `context.db`: a mysql2 (promise) pool or connection. */
export type MysqlQueryable = Pick<Connection, 'query' | 'execute'>;

/** The key table (mysql-migrations/0001), in the database the connection uses, beside the adopter's tables. */
export const MYSQL_KEY_TABLE = 'retrysafe_idempotency_keys';

/** ER_DUP_ENTRY: the claim's INSERT met an existing row of the primary key. */
export const ER_DUP_ENTRY = 1062;

const PK = 'principal_id = ? AND service = ? AND scope = ? AND idempotency_key = ?';

// expired, lease_expired: 0/1. lease_remaining: whole seconds, rounded up.
const EXISTING_COLUMNS = `attempts, state, fingerprint, correlation_id,
  expires_at <= UTC_TIMESTAMP(6) AS expired,
  COALESCE(lease_expires_at <= UTC_TIMESTAMP(6), 0) AS lease_expired,
  CAST(CEIL(GREATEST(COALESCE(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lease_expires_at), 0), 0) / 1000000) AS SIGNED) AS lease_remaining,
  response_status, response_content_type, response_body, response_key_id, response_ref`;

const CLAIM_SQL = `INSERT INTO ${MYSQL_KEY_TABLE}
  (principal_id, service, scope, idempotency_key, state, fingerprint, correlation_id, attempts, lease_expires_at, created_at, expires_at)
  VALUES (?, ?, ?, ?, 'in_progress', ?, ?, 1, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)`;

const READ_SQL = `SELECT ${EXISTING_COLUMNS} FROM ${MYSQL_KEY_TABLE} WHERE ${PK}`;

/**
 * Inside a transaction, the read after a conflict is a locking read: it sees the latest committed
 * row whatever the transaction's REPEATABLE READ snapshot (none is taken before it, but the work
 * of an earlier round may have) and holds the shared lock the failed INSERT already took.
 */
const READ_LOCKING_SQL = `${READ_SQL} LOCK IN SHARE MODE`;

/** The takeover's locking read: the row's attempt number and whether it may be taken over, X-locked until the transaction ends. */
const TAKE_OVER_LOCK_SQL = `SELECT attempts,
  expires_at <= UTC_TIMESTAMP(6) AS expired,
  (expires_at <= UTC_TIMESTAMP(6) OR state = 'failed' OR (state = 'in_progress' AND lease_expires_at <= UTC_TIMESTAMP(6))) AS eligible
  FROM ${MYSQL_KEY_TABLE} WHERE ${PK} FOR UPDATE`;

// MySQL evaluates SET assignments left to right, each seeing the ones before: created_at and
// expires_at are decided by the locking read's `expired`, passed in, not by each other.
const TAKE_OVER_SQL = `UPDATE ${MYSQL_KEY_TABLE} SET
  state = 'in_progress', fingerprint = ?, correlation_id = ?, attempts = attempts + 1,
  lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
  created_at = IF(?, UTC_TIMESTAMP(6), created_at),
  expires_at = IF(?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, expires_at),
  completed_at = NULL, response_status = NULL, response_content_type = NULL, response_body = NULL,
  response_key_id = NULL, response_size = NULL, response_ref = NULL
  WHERE ${PK} AND attempts = ?`;

const COMPLETE_SQL = `UPDATE ${MYSQL_KEY_TABLE} SET
  state = 'completed', completed_at = UTC_TIMESTAMP(6), lease_expires_at = NULL,
  response_status = ?, response_content_type = ?, response_body = ?, response_key_id = ?, response_size = ?, response_ref = ?
  WHERE ${PK} AND attempts = ? AND state = 'in_progress'`;

const FAIL_SQL = `UPDATE ${MYSQL_KEY_TABLE} SET state = 'failed', lease_expires_at = NULL WHERE ${PK} AND attempts = ? AND state = 'in_progress'`;

/** The statement texts, for tests. */
export const mysqlStatementTexts = { claim: CLAIM_SQL, read: READ_SQL, readLocking: READ_LOCKING_SQL, takeOverLock: TAKE_OVER_LOCK_SQL, takeOver: TAKE_OVER_SQL, complete: COMPLETE_SQL, fail: FAIL_SQL };

interface ExistingRow extends RowDataPacket {
  attempts: number;
  state: ExistingKey['state'];
  fingerprint: Buffer;
  correlation_id: string;
  // Integers, or their text on a pool opened with bigNumberStrings (an adopter's): Number() either way.
  expired: number | string;
  lease_expired: number | string;
  lease_remaining: number | string;
  response_status: number | null;
  response_content_type: string | null;
  response_body: Buffer | null;
  response_key_id: string | null;
  response_ref: string | null;
}

function pk(id: KeyIdentity): [string, string, Buffer, Buffer] {
  return [id.principalId, id.service, Buffer.from(id.scope, 'utf8'), Buffer.from(id.key, 'utf8')];
}

/** Microseconds, as the INTERVAL ... MICROSECOND the statements add. */
function micros(ms: number): number {
  return Math.round(ms) * 1000;
}

function toExisting(row: ExistingRow): ExistingKey {
  return {
    state: row.state,
    fingerprint: row.fingerprint,
    correlationId: row.correlation_id,
    attempts: row.attempts,
    expired: Number(row.expired) === 1,
    leaseExpired: Number(row.lease_expired) === 1,
    leaseRemainingSeconds: Number(row.lease_remaining),
    responseStatus: row.response_status,
    responseContentType: row.response_content_type,
    responseBody: row.response_body,
    responseKeyId: row.response_key_id,
    responseRef: row.response_ref,
  };
}

/** What a mysql2 promise pool or connection wraps: the callback pool or connection (`pool`, `connection`), whose execute() sends the same statement. */
/** A statement's parameters (each ? in turn). */
type StatementValue = string | number | Buffer | null;

/** What a mysql2 promise pool or connection wraps: the callback pool or connection (`pool`, `connection`), which sends the same statements. */
interface CallbackApi {
  execute(sql: string, values: StatementValue[], done: (error: Error | null, result: unknown) => void): unknown;
  query(sql: string, done: (error: Error | null, result: unknown) => void): unknown;
}

function callbackApi(db: MysqlQueryable): CallbackApi | undefined {
  const core = (db as { pool?: unknown }).pool ?? (db as { connection?: unknown }).connection;
  if (typeof core !== 'object' || core === null) return undefined;
  const { execute, query } = core as { execute?: unknown; query?: unknown };
  return typeof execute === 'function' && typeof query === 'function' ? (core as CallbackApi) : undefined;
}

// The store's statements go through the callback API mysql2's promise API wraps: the wrapper
// captures the caller's stack on every call (its `trace` option, on by default) for an error it
// may never have, and that cost about 20 us of Node CPU a statement, as much as the store's own
// work for a claim (docs/mysql.md, Speed). A failure then carries mysql2's own stack; its errno,
// code and message are the same. A queryable without that API (not mysql2's) gets its own calls.

/** Executes one of the store's statements (a prepared statement, as db.execute() sends it): its rows or result header. */
function run<T>(db: MysqlQueryable, sql: string, values: StatementValue[]): Promise<T> {
  const core = callbackApi(db);
  if (!core) return db.execute(sql, values).then(([result]) => result as T);
  return new Promise<T>((resolve, reject) => {
    core.execute(sql, values, (error, result) => {
      if (error) reject(error);
      else resolve(result as T);
    });
  });
}

/** Sends a statement without parameters as text (db.query()): START TRANSACTION, COMMIT, ROLLBACK, a session's SET. */
export function sendText(db: MysqlQueryable, sql: string): Promise<void> {
  const core = callbackApi(db);
  if (!core) return db.query(sql).then(() => undefined);
  return new Promise<void>((resolve, reject) => {
    core.query(sql, (error) => {
      if (error) reject(error);
      else resolve();
    });
  });
}

/** Whether a mysql2 error carries this server error number. */
export function hasErrno(error: unknown, errno: number): boolean {
  return typeof error === 'object' && error !== null && (error as { errno?: unknown }).errno === errno;
}

/**
 * The claim: one INSERT on the primary key. A concurrent claim of the same key waits for the
 * holder's transaction (bounded by innodb_lock_wait_timeout, then 1205) and fails with 1062 once
 * it committed; only then is the existing row read (`locking`: inside a transaction). Never
 * INSERT IGNORE (it also turns truncation and other errors into warnings) nor ON DUPLICATE KEY
 * UPDATE (whose 0/1/2 affected rows would stand in for the answer).
 */
export async function claimMysqlKey(db: MysqlQueryable, claim: ClaimValues, locking: boolean): Promise<ClaimResult> {
  try {
    await run<ResultSetHeader>(db, CLAIM_SQL, [...pk(claim), claim.fingerprint, claim.correlationId, micros(claim.leaseMs), micros(claim.retentionMs)]);
    return { claimed: true, attempts: 1 };
  } catch (error) {
    if (!hasErrno(error, ER_DUP_ENTRY)) throw error;
  }
  return { claimed: false, existing: await readMysqlKey(db, claim, locking) };
}

/** Reads one scoped key (primary key lookup). */
export async function readMysqlKey(db: MysqlQueryable, id: KeyIdentity, locking = false): Promise<ExistingKey | null> {
  const rows = await run<ExistingRow[]>(db, locking ? READ_LOCKING_SQL : READ_SQL, pk(id));
  const row = rows[0];
  return row ? toExisting(row) : null;
}

/**
 * Takes over a crashed (lease past), failed or expired key if its attempt number is still
 * `seenAttempts`; `db` must be inside a transaction. SELECT ... FOR UPDATE locks the row (the
 * latest committed version, whatever the snapshot), so of many concurrent takers exactly one
 * finds its number unchanged; the UPDATE then goes by the primary key.
 */
export async function takeOverMysqlKey(db: MysqlQueryable, claim: ClaimValues, seenAttempts: number): Promise<number | null> {
  const rows = await run<(RowDataPacket & { attempts: number; expired: number | string; eligible: number | string })[]>(db, TAKE_OVER_LOCK_SQL, pk(claim));
  const row = rows[0];
  if (!row || row.attempts !== seenAttempts || Number(row.eligible) !== 1) return null;
  const expired = Number(row.expired) === 1 ? 1 : 0;
  const result = await run<ResultSetHeader>(db, TAKE_OVER_SQL, [
    claim.fingerprint,
    claim.correlationId,
    micros(claim.leaseMs),
    expired,
    expired,
    micros(claim.retentionMs),
    ...pk(claim),
    seenAttempts,
  ]);
  return result.affectedRows === 1 ? seenAttempts + 1 : null;
}

/** Records the response if attempt `values.attempts` still holds the claim (fenced). Primary key lookup. */
export async function completeMysqlKey(db: MysqlQueryable, values: CompletionValues): Promise<boolean> {
  const result = await run<ResultSetHeader>(db, COMPLETE_SQL, [
    values.status,
    values.contentType,
    values.body,
    values.keyId,
    values.size,
    values.reference,
    ...pk(values),
    values.attempts,
  ]);
  return result.affectedRows === 1;
}

/** Marks attempt `attempts` failed and retryable if it still holds the claim. Primary key lookup. */
export async function failMysqlKey(db: MysqlQueryable, id: KeyIdentity, attempts: number): Promise<boolean> {
  const result = await run<ResultSetHeader>(db, FAIL_SQL, [...pk(id), attempts]);
  return result.affectedRows === 1;
}
