/**
 * The MySQL/MariaDB backend: key records in the service's own MySQL or MariaDB database, beside
 * its tables, so a transactional endpoint's effects and its key commit together.
 *
 * @module @retrysafe/store/mysql
 */
// MysqlBackend implements the store's persistence seam (backend.ts) with mysql2. Transactional
// mode: one pooled connection per transaction, REPEATABLE READ (stated on every transaction's
// connection), the claim's wait on a concurrent holder bounded by innodb_lock_wait_timeout
// (whole seconds: the policy's lockTimeoutMs rounded up), and the work gets that connection as
// `context.db`; the read of the committed row before it goes on that connection too (session():
// one pool checkout a request). Claim-first mode: each statement autocommits on the pool; a
// takeover runs in a short transaction of its own (SELECT ... FOR UPDATE, then the UPDATE). mysql2 is an optional
// peer dependency: only this module (and createRetrysafe's `mysql` option) loads it.
import mysql, { type Pool, type PoolConnection } from 'mysql2/promise';
import type { BackendSession, BackendTransaction, IdempotencyBackend, KeyOperations } from './backend.js';
import type { ClaimResult, ClaimValues, CompletionValues, ExistingKey, KeyIdentity } from './statements.js';
import { checkMysqlSchema } from './mysql-migrate.js';
import { claimMysqlKey, completeMysqlKey, failMysqlKey, readMysqlKey, sendText, takeOverMysqlKey, type MysqlQueryable } from './mysql-statements.js';

export { MYSQL_KEY_TABLE, mysqlStatementTexts, type MysqlQueryable } from './mysql-statements.js';
export { MysqlKeyReads, MysqlUnavailableError, mysqlMissingDashboardIndexes, mysqlDashboardGrants, mysqlReaderAccess, mysqlPrincipalKeysStatement, mysqlKeyReadStatementTexts, MYSQL_DASHBOARD_COLUMNS, type MysqlStoreFigures } from './mysql-key-reads.js';
export { migrateMysql, checkMysqlSchema, readMysqlMigrations, MYSQL_MIGRATIONS_FOLDER, type MysqlMigration, type MysqlMigrationResult } from './mysql-migrate.js';

/** ER_LOCK_WAIT_TIMEOUT: a statement waited innodb_lock_wait_timeout out (the statement is rolled back, the transaction is not). */
export const ER_LOCK_WAIT_TIMEOUT = 1205;
/** ER_LOCK_DEADLOCK: InnoDB chose this transaction as a deadlock's victim and rolled it back whole. */
export const ER_LOCK_DEADLOCK = 1213;

/** The isolation level of the store's transactions (MySQL's and MariaDB's default, stated rather than assumed). */
export const MYSQL_ISOLATION_LEVEL = 'REPEATABLE READ';

/** How the backend's own pool connects (spread into mysql.createPool's options). */
export const MYSQL_POOL_SETTINGS = {
  // DATETIME columns are UTC (UTC_TIMESTAMP): read them as UTC.
  timezone: 'Z',
  // Prepared statements per connection (execute()): the store's six, and room for the work's.
  maxPreparedStatements: 64,
  enableKeepAlive: true,
} as const;

/** The `mysql` option of createRetrysafe: a URI (the backend opens, and stop() closes, its own pool) or a mysql2 promise pool. */
export type MysqlOptions = { uri: string; maxConnections?: number } | { pool: Pool };

// createRetrysafe's `mysql` option and the work's context.db, as mysql2's types, wherever this
// module is in the program (retrysafe.ts names no mysql2 type: see MysqlBackendTypes there).
declare module './retrysafe.js' {
  interface MysqlBackendTypes {
    options: MysqlOptions;
    db: MysqlQueryable;
  }
}

/** Opens a pool for the backend from a mysql://user:password@host:port/database URI. */
export function createMysqlPool(uri: string, maxConnections = 10): Pool {
  return mysql.createPool({ uri, connectionLimit: maxConnections, connectTimeout: 5_000, ...MYSQL_POOL_SETTINGS });
}

const SERVER_ERRNOS_TRANSIENT: ReadonlySet<number> = new Set([
  1040, // too many connections
  1053, // server shutdown in progress
  1213, // deadlock: the transaction was rolled back
  1927, // MariaDB: connection killed
  2006, // server has gone away
  2013, // lost connection during query
]);

const CLIENT_CODES_TRANSIENT: ReadonlySet<string> = new Set([
  'PROTOCOL_CONNECTION_LOST',
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
]);

/** A failure that may pass if the (fenced) statement is sent again: a lost or refused connection, a shutdown, a deadlock's rollback. */
export function isTransientMysqlFailure(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const { errno, code, fatal } = error as { errno?: unknown; code?: unknown; fatal?: unknown };
  if (typeof errno === 'number' && SERVER_ERRNOS_TRANSIENT.has(errno)) return true;
  if (typeof code === 'string' && CLIENT_CODES_TRANSIENT.has(code)) return true;
  return fatal === true;
}

/** Per connection (mysql2's core connection): the lock wait timeout last set on it, and whether its isolation level was stated. */
const connectionSettings = new WeakMap<object, { lockWaitSeconds: number | null }>();

/** The whole seconds innodb_lock_wait_timeout takes for a policy's lock timeout (at least 1: MySQL 8's minimum). */
export function lockWaitSeconds(lockTimeoutMs: number): number {
  return Math.max(1, Math.ceil(lockTimeoutMs / 1000));
}

/**
 * Starts a transaction on `connection`: REPEATABLE READ stated for its session once, the lock wait
 * bounded (sent only when it differs from what the connection has), then START TRANSACTION.
 */
async function begin(connection: PoolConnection, lockTimeoutMs: number): Promise<void> {
  const core = connection.connection as object;
  let settings = connectionSettings.get(core);
  if (!settings) {
    await sendText(connection, `SET SESSION TRANSACTION ISOLATION LEVEL ${MYSQL_ISOLATION_LEVEL}`);
    settings = { lockWaitSeconds: null };
    connectionSettings.set(core, settings);
  }
  const seconds = lockWaitSeconds(lockTimeoutMs);
  if (settings.lockWaitSeconds !== seconds) {
    await sendText(connection, `SET SESSION innodb_lock_wait_timeout = ${seconds}`);
    settings.lockWaitSeconds = seconds;
  }
  await sendText(connection, 'START TRANSACTION');
}

function giveBack(connection: PoolConnection, broken?: Error): void {
  if (broken) connection.destroy();
  else connection.release();
}

/**
 * MySQL/MariaDB key records (mysql-migrations/ applied: migrateMysql or `retrysafe migrate
 * --mysql`). Claim-first: statements on the pool, each its own autocommitted transaction.
 */
export class MysqlBackend implements IdempotencyBackend<MysqlQueryable> {
  constructor(private readonly pool: Pool) {}

  get db(): MysqlQueryable {
    return this.pool;
  }

  claim(claim: ClaimValues): Promise<ClaimResult> {
    return claimMysqlKey(this.pool, claim, false);
  }

  read(id: KeyIdentity): Promise<ExistingKey | null> {
    return readMysqlKey(this.pool, id);
  }

  /** Outside a request's transaction: the locking read and the update in a short transaction of their own. */
  async takeOver(claim: ClaimValues, seenAttempts: number): Promise<number | null> {
    const connection = await this.pool.getConnection();
    try {
      // Only another takeover of the same key holds the row, for a moment: a short bound.
      await begin(connection, 5_000);
      const attempts = await takeOverMysqlKey(connection, claim, seenAttempts);
      await sendText(connection, attempts === null ? 'ROLLBACK' : 'COMMIT');
      giveBack(connection);
      return attempts;
    } catch (error) {
      await sendText(connection, 'ROLLBACK').then(
        () => giveBack(connection),
        (rollbackError: unknown) => giveBack(connection, rollbackError as Error),
      );
      throw error;
    }
  }

  complete(values: CompletionValues): Promise<boolean> {
    return completeMysqlKey(this.pool, values);
  }

  fail(id: KeyIdentity, attempts: number): Promise<boolean> {
    return failMysqlKey(this.pool, id, attempts);
  }

  async transaction(lockTimeoutMs: number): Promise<BackendTransaction<MysqlQueryable>> {
    return beginOn(await this.pool.getConnection(), lockTimeoutMs);
  }

  /** A transactional request's read of the committed row and its transaction on one connection: one pool checkout, not two. */
  async session(): Promise<BackendSession<MysqlQueryable>> {
    return new MysqlSession(await this.pool.getConnection());
  }

  /** A statement waited its lock wait timeout out (1205), or lost a deadlock (1213: a concurrent holder of the key); either is a 409. */
  isLockTimeout(error: unknown): boolean {
    return typeof error === 'object' && error !== null && ((error as { errno?: unknown }).errno === ER_LOCK_WAIT_TIMEOUT || (error as { errno?: unknown }).errno === ER_LOCK_DEADLOCK);
  }

  isTransient(error: unknown): boolean {
    return isTransientMysqlFailure(error);
  }
}

/** Begins a transaction on `connection`, which it then owns; should the beginning fail, the connection is discarded. */
async function beginOn(connection: PoolConnection, lockTimeoutMs: number): Promise<MysqlTransaction> {
  try {
    await begin(connection, lockTimeoutMs);
  } catch (error) {
    giveBack(connection, error as Error);
    throw error;
  }
  return new MysqlTransaction(connection);
}

/**
 * One pooled connection for one request (MysqlBackend.session): its statements autocommit, each
 * its own transaction (no snapshot outlives one), until transaction() takes the connection over.
 */
class MysqlSession implements BackendSession<MysqlQueryable> {
  private spent = false;

  constructor(private readonly connection: PoolConnection) {}

  get db(): MysqlQueryable {
    return this.connection;
  }

  claim(claim: ClaimValues): Promise<ClaimResult> {
    return claimMysqlKey(this.connection, claim, false);
  }

  read(id: KeyIdentity): Promise<ExistingKey | null> {
    return readMysqlKey(this.connection, id);
  }

  /** Outside a transaction, as the backend's own: the locking read and the update in a short transaction of their own, on this connection. */
  async takeOver(claim: ClaimValues, seenAttempts: number): Promise<number | null> {
    await begin(this.connection, 5_000);
    try {
      const attempts = await takeOverMysqlKey(this.connection, claim, seenAttempts);
      await sendText(this.connection, attempts === null ? 'ROLLBACK' : 'COMMIT');
      return attempts;
    } catch (error) {
      // A connection whose rollback failed may still be in the transaction: discarded, never pooled.
      await sendText(this.connection, 'ROLLBACK').catch((rollbackError: unknown) => this.release(rollbackError as Error));
      throw error;
    }
  }

  complete(values: CompletionValues): Promise<boolean> {
    return completeMysqlKey(this.connection, values);
  }

  fail(id: KeyIdentity, attempts: number): Promise<boolean> {
    return failMysqlKey(this.connection, id, attempts);
  }

  transaction(lockTimeoutMs: number): Promise<BackendTransaction<MysqlQueryable>> {
    if (this.spent) return Promise.reject(new Error('this session was released or its connection taken over'));
    this.spent = true;
    return beginOn(this.connection, lockTimeoutMs);
  }

  release(broken?: Error): void {
    if (this.spent) return;
    this.spent = true;
    giveBack(this.connection, broken);
  }
}

/** One transaction on one pooled connection; the work's `context.db` is that connection. */
class MysqlTransaction implements BackendTransaction<MysqlQueryable>, KeyOperations<MysqlQueryable> {
  readonly begun: Promise<void> = Promise.resolve();

  constructor(private readonly connection: PoolConnection) {}

  get db(): MysqlQueryable {
    return this.connection;
  }

  claim(claim: ClaimValues): Promise<ClaimResult> {
    return claimMysqlKey(this.connection, claim, true);
  }

  read(id: KeyIdentity): Promise<ExistingKey | null> {
    return readMysqlKey(this.connection, id, true);
  }

  takeOver(claim: ClaimValues, seenAttempts: number): Promise<number | null> {
    return takeOverMysqlKey(this.connection, claim, seenAttempts);
  }

  complete(values: CompletionValues): Promise<boolean> {
    return completeMysqlKey(this.connection, values);
  }

  fail(id: KeyIdentity, attempts: number): Promise<boolean> {
    return failMysqlKey(this.connection, id, attempts);
  }

  /** The completion, then COMMIT; should the completion fail, the caller's abandon() rolls everything back. */
  async completeAndCommit(values: CompletionValues): Promise<void> {
    await completeMysqlKey(this.connection, values);
    await sendText(this.connection, 'COMMIT');
  }

  async rollback(): Promise<void> {
    await sendText(this.connection, 'ROLLBACK');
  }

  abandon(): void {
    const { connection } = this;
    void sendText(connection, 'ROLLBACK').then(
      () => giveBack(connection),
      (error: unknown) => giveBack(connection, error as Error),
    );
  }

  release(broken?: Error): void {
    giveBack(this.connection, broken);
  }
}

/**
 * The backend createRetrysafe's `mysql` option asks for: on the pool given, or on one opened from
 * the URI (closed by `close`), once the database is found migrated.
 */
export async function openMysqlBackend(options: MysqlOptions): Promise<{ backend: MysqlBackend; pool: Pool; close: () => Promise<void> }> {
  const owns = !('pool' in options);
  const pool = 'pool' in options ? options.pool : createMysqlPool(options.uri, options.maxConnections);
  const close = owns ? () => pool.end() : () => Promise.resolve();
  try {
    await checkMysqlSchema(pool);
  } catch (error) {
    await close().catch(() => undefined);
    throw error;
  }
  return { backend: new MysqlBackend(pool), pool, close };
}

export {
  sweepMysql,
  releaseMysqlStaleClaims,
  defaultMysqlSweepOptions,
  mysqlRetentionTexts,
  type MysqlSweepOptions,
  type MysqlSweepResult,
  type MysqlScopeEvidence,
} from './mysql-retention.js';
