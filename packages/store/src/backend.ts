// The store's persistence seam. IdempotencyStore decides (replay, mismatch, conflict, takeover),
// fingerprints, seals and reports; everything it keeps goes through an IdempotencyBackend: the
// five operations on one scoped key, outside a transaction (claim-first) or inside one whose
// claims wait a bounded time for a concurrent holder (transactional). The adapters and the HTTP
// semantics sit on IdempotencyStore alone, so another backend is one more implementation of
// this interface. Postgres is the first (PostgresBackend, below; the statements in statements.ts).
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import {
  POOLER_TRANSACTION_SETTINGS,
  statementsFor,
  type PoolerMode,
  type ClaimResult,
  type ClaimValues,
  type CompletionValues,
  type ExistingKey,
  type KeyIdentity,
  type Queryable,
  type StoreStatements,
} from './statements.js';

/** The five operations on one scoped key, bound to where they run (outside or inside a transaction). */
export interface KeyOperations<Db = Queryable> {
  /**
   * Inserts the key as in progress, unless it exists: then `existing` is its row when this
   * operation could see it (null: read it afresh). Atomic against concurrent claims of the key.
   */
  claim(claim: ClaimValues): Promise<ClaimResult>;
  read(id: KeyIdentity): Promise<ExistingKey | null>;
  /** Takes over an expired, failed or lease-expired key if its attempt number is still `seenAttempts`; the new number, or null. */
  takeOver(claim: ClaimValues, seenAttempts: number): Promise<number | null>;
  /** Records the response if attempt `values.attempts` still holds the claim (and, where given and the backend fences by it, `values.correlationId`). */
  complete(values: CompletionValues): Promise<boolean>;
  /**
   * Marks attempt `attempts` failed and retryable, if it still holds the claim. The store passes
   * the claim's values: a backend may fence by their correlation id too (Redis does).
   */
  fail(id: KeyIdentity & { correlationId?: string }, attempts: number): Promise<boolean>;
  /** What the endpoint's work and re-derivation get as `context.db` (Postgres: a pg pool or client; MySQL: a mysql2 pool or connection). */
  readonly db: Db;
}

/** A transaction: the work's effects and the key's completion commit together or not at all. */
export interface BackendTransaction<Db = Queryable> extends KeyOperations<Db> {
  /**
   * Settles once the transaction has begun. A backend may send the operations called meanwhile
   * along with it (Postgres: pipelined, one round trip), so the caller awaits it beside them.
   */
  readonly begun: Promise<void>;
  /**
   * Records the response of the claimed key and commits. A backend may send both at once
   * (Postgres: pipelined, one round trip); should the completion fail, nothing of the
   * transaction may remain, and the completion's error is thrown.
   */
  completeAndCommit(values: CompletionValues): Promise<void>;
  /** Undoes the transaction and lets it go; retries on this transaction after it are not allowed. */
  rollback(): Promise<void>;
  /** Undoes the transaction without the caller waiting for it (the answer does not depend on it). */
  abandon(): void;
  /** Gives the transaction's connection back; `broken` discards it. Called once, after commit or rollback. */
  release(broken?: Error): void;
}

/**
 * One connection held for one request (IdempotencyBackend.session): operations outside any
 * transaction, then at most one transaction, which takes the connection over.
 */
export interface BackendSession<Db = Queryable> extends KeyOperations<Db> {
  /**
   * Starts a transaction on this session's connection, as IdempotencyBackend.transaction does.
   * The transaction then owns the connection (its release() gives it back): the session is spent
   * and must not be released or used again, whether this succeeds or throws.
   */
  transaction(lockTimeoutMs: number): Promise<BackendTransaction<Db>>;
  /** Gives the connection back unless a transaction took it over; `broken` discards it. */
  release(broken?: Error): void;
}

export interface IdempotencyBackend<Db = Queryable> extends KeyOperations<Db> {
  /**
   * false: the backend shares no transaction with the work's effects (Redis), so it is claim-first
   * only: the store refuses a transactional request (TransactionsUnsupportedError) rather than
   * running it without the guarantee, and transaction() refuses too. Absent: both modes.
   */
  readonly transactional?: boolean;
  /**
   * Starts a transaction in which a claim or takeover that meets a concurrent holder of the key
   * waits at most `lockTimeoutMs`, then fails with an error isLockTimeout recognises.
   */
  transaction(lockTimeoutMs: number): Promise<BackendTransaction<Db>>;
  /** Whether an operation failed because it waited its lock timeout out (a 409, not a 500). */
  isLockTimeout(error: unknown): boolean;
  /**
   * Optional: one connection for a transactional request's read of the committed row and its
   * transaction, where the backend pools connections (Postgres: one pool checkout instead of two).
   * Without it the store reads and begins separately, with the same round trips.
   */
  session?(): Promise<BackendSession<Db>>;
  /**
   * Optional: whether an operation failed in a way that says nothing about the statement's
   * outcome and may pass if sent again (a connection lost or refused, a pooler's error). The
   * store retries a completion that failed so, within its lease (its statements are fenced).
   */
  isTransient?(error: unknown): boolean;
}

const LOCK_NOT_AVAILABLE = '55P03';

/** The five key operations, each one of the layout's statements on one connection or pool. */
abstract class PostgresKeyOperations implements KeyOperations {
  constructor(
    protected readonly sql: StoreStatements,
    private readonly on: Queryable,
    /** What the work gets (the pool or the connection itself), when the statements run elsewhere (`on`: in transactions of their own). */
    private readonly given: Queryable = on,
  ) {}

  get db(): Queryable {
    return this.given;
  }

  claim(claim: ClaimValues): Promise<ClaimResult> {
    return this.sql.claim(this.on, claim);
  }

  read(id: KeyIdentity): Promise<ExistingKey | null> {
    return this.sql.read(this.on, id);
  }

  takeOver(claim: ClaimValues, seenAttempts: number): Promise<number | null> {
    return this.sql.takeOver(this.on, claim, seenAttempts);
  }

  complete(values: CompletionValues): Promise<boolean> {
    return this.sql.complete(this.on, values);
  }

  fail(id: KeyIdentity, attempts: number): Promise<boolean> {
    return this.sql.fail(this.on, id, attempts);
  }
}

/**
 * Postgres: the statements of the key table's layout (statements.ts), on the store's pool. A
 * transaction holds one pooled connection; on a pipelined pool (STORE_POOL_SETTINGS) its BEGIN
 * (with SET LOCAL lock_timeout) and the first claim leave in one round trip, and a rollback is
 * sent without waiting for it. Methods rather than closures: nothing is allocated per request
 * that the statements do not need.
 */
export class PostgresBackend extends PostgresKeyOperations implements IdempotencyBackend {
  private readonly pooler: PoolerMode | undefined;

  /**
   * `pooler: 'transaction'`: the pool goes through a transaction-mode pooler (PgBouncer 1.18 and
   * later, opened with STORE_POOLER_POOL_SETTINGS): unnamed statements (with
   * `transaction-prepared`, a pooler that tracks named ones: named, as direct), and the settings the
   * plans need in each of the store's transactions (a statement outside a request's transaction
   * runs in one of its own, pipelined: BEGIN, the statement and COMMIT in one round trip).
   * `plannerSettingsInPlace`: every server connection already has them (the store's role or
   * database: ALTER ROLE ... SET enable_seqscan = off; plannerSettingsInPlace() reads it), so
   * the statements go alone, unnamed: a third of the statements per claim-first request.
   */
  constructor(
    private readonly pool: pg.Pool,
    layout: 'plain' | 'partitioned' = 'plain',
    options: { pooler?: PoolerMode; plannerSettingsInPlace?: boolean } = {},
  ) {
    const wrap = options.pooler !== undefined && options.plannerSettingsInPlace !== true;
    super(statementsFor(layout, options.pooler), wrap ? new OwnTransactions({ pool }) : pool, pool);
    this.pooler = wrap ? options.pooler : undefined;
  }

  isLockTimeout(error: unknown): boolean {
    return (error as { code?: unknown } | null)?.code === LOCK_NOT_AVAILABLE;
  }

  isTransient(error: unknown): boolean {
    return isTransientFailure(error);
  }

  async transaction(lockTimeoutMs: number): Promise<BackendTransaction> {
    return beginOn(this.sql, hold(await this.pool.connect()), lockTimeoutMs, this.pooler);
  }

  /** A pooled connection for one request (its read, then its transaction): one checkout. */
  async session(): Promise<BackendSession> {
    return new PostgresSession(this.sql, hold(await this.pool.connect()), this.pooler);
  }
}

/**
 * SQLSTATEs that say the statement did not run to an outcome the server kept: the connection's
 * (class 08, PgBouncer's own errors are 08P01), the server's shutting down or not accepting
 * connections yet (57P01-57P03), too many connections (53300), a serialization failure or a
 * deadlock (40001, 40P01: rolled back).
 */
const TRANSIENT_SQLSTATES: ReadonlySet<string> = new Set(['57P01', '57P02', '57P03', '53300', '40001', '40P01']);

/** A failure that may pass if the (fenced) statement is sent again: a lost or refused connection, a pooler's error. */
export function isTransientFailure(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const code: unknown = (error as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (code.startsWith('08') || TRANSIENT_SQLSTATES.has(code)) return true;
    if (/^E[A-Z]+$/.test(code)) return ['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN'].includes(code);
    return false;
  }
  // node-postgres's own, without a code: the connection ended, or could not be had in time.
  const message: unknown = (error as { message?: unknown }).message;
  return typeof message === 'string' && /^(Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Client was closed)/.test(message);
}

/** An error the server sent (the connection is still usable), rather than one of the connection itself. */
function fromServer(error: unknown): boolean {
  return typeof error === 'object' && error !== null && typeof (error as { severity?: unknown }).severity === 'string' && !isTransientFailure(error);
}

const POOLER_BEGIN = `BEGIN; ${POOLER_TRANSACTION_SETTINGS}`;

/**
 * Whether the connections `db` opens already carry the settings the store's plans need (the role's
 * or the database's defaults: ALTER ROLE ... SET enable_seqscan = off), so that a transaction-mode
 * pooler's server connections have them without a SET LOCAL in each transaction.
 */
export async function plannerSettingsInPlace(db: Pick<pg.Pool, 'query'>): Promise<boolean> {
  const { rows } = await db.query<{ value: string }>("SELECT current_setting('enable_seqscan') AS value");
  return rows[0]?.value === 'off';
}

/**
 * Whether the pooler `db` goes through tracks protocol-level named statements itself
 * (`pooler: 'transaction-prepared'`: PgBouncer 1.21 and later with max_prepared_statements above
 * 0), rather than passing their names to whichever server connection a transaction gets. Such a
 * pooler prepares a client's statement on each server connection under a name of its own
 * (PgBouncer: PGBOUNCER_<n>), so a statement prepared inside a transaction is listed there
 * under another name; passed through (an older pooler, the setting at 0, or no pooler at all), it
 * is listed under the client's. One transaction, three statements; its name is random, so a
 * pooler that passes it through keeps nothing another client could meet.
 */
export async function poolerTracksPreparedStatements(pool: Pick<pg.Pool, 'connect'>): Promise<boolean> {
  const client = await pool.connect();
  const name = `retrysafe_probe_${randomBytes(6).toString('hex')}`;
  try {
    await client.query('BEGIN');
    await client.query({ name, text: 'SELECT 1 AS probe' });
    const { rows } = await client.query<{ name: string }>('SELECT name FROM pg_prepared_statements');
    await client.query('COMMIT');
    client.release();
    return !rows.some((row) => row.name === name);
  } catch (error) {
    client.release(error as Error);
    throw error;
  }
}

/** Why `pooler: 'transaction-prepared'` was refused (poolerTracksPreparedStatements said no). */
export const UNTRACKED_PREPARED_STATEMENTS =
  "passes named statements through to the server rather than tracking them (PgBouncer before 1.21, max_prepared_statements = 0, or no pooler at all), so a statement prepared in one transaction would be missing, or already there, in the next: set max_prepared_statements (PgBouncer 1.21 and later; 200 is its default from 1.24), or use the 'transaction' pooler mode (unnamed statements)";

/**
 * Runs one statement in a transaction of its own that opens with the settings the store's
 * plans need (POOLER_TRANSACTION_SETTINGS): BEGIN, the statement and COMMIT leave together on a
 * pipelined connection (one round trip; the pooler keeps the transaction on one server
 * connection), one after the other on a connection that is not. Should the statement fail, the
 * COMMIT is answered with a rollback.
 */
async function inOwnTransaction(client: pg.PoolClient, config: pg.QueryConfig): Promise<pg.QueryResult> {
  if (!client.pipeline) {
    // Not pipelined: nothing is sent while a statement is pending (node-postgres 8 queues it
    // with a deprecation warning, 9 refuses it).
    await client.query(POOLER_BEGIN);
    let ran: pg.QueryResult;
    try {
      ran = await client.query(config);
    } catch (error) {
      // Ends the aborted transaction; a connection that cannot take it is released as broken.
      await client.query('COMMIT').catch(ignore);
      throw error;
    }
    await client.query('COMMIT');
    return ran;
  }
  const [began, ran, committed] = await Promise.allSettled([client.query(POOLER_BEGIN), client.query(config), client.query('COMMIT')]);
  if (began.status === 'rejected') throw began.reason;
  if (ran.status === 'rejected') throw ran.reason;
  if (committed.status === 'rejected') throw committed.reason;
  return ran.value;
}

/** A Queryable whose every statement runs in a transaction of its own (inOwnTransaction), on a pooled connection or on a held one. */
class OwnTransactions implements Queryable {
  constructor(private readonly on: { pool: pg.Pool } | { client: pg.PoolClient }) {}

  query = ((config: pg.QueryConfig): Promise<pg.QueryResult> => this.run(config)) as Queryable['query'];

  private async run(config: pg.QueryConfig): Promise<pg.QueryResult> {
    if ('client' in this.on) return inOwnTransaction(this.on.client, config);
    const client = hold(await this.on.pool.connect());
    try {
      const result = await inOwnTransaction(client, config);
      giveBack(client);
      return result;
    } catch (error) {
      giveBack(client, fromServer(error) ? undefined : (error as Error));
      throw error;
    }
  }
}

/** Begins a transaction on a checked-out connection, which the transaction then owns (released with it, or here on failure). */
async function beginOn(sql: StoreStatements, client: pg.PoolClient, lockTimeoutMs: number, pooler?: PoolerMode): Promise<BackendTransaction> {
  const begin = pooler
    ? `BEGIN; SET LOCAL lock_timeout = ${Math.max(1, Math.round(lockTimeoutMs))}; ${POOLER_TRANSACTION_SETTINGS}`
    : `BEGIN; SET LOCAL lock_timeout = ${Math.max(1, Math.round(lockTimeoutMs))}`;
  if (client.pipeline) return new PostgresTransaction(sql, client, client.query(begin).then(settledVoid));
  // Not pipelined: wait for the BEGIN before anything else is sent on the connection.
  try {
    await client.query(begin);
  } catch (error) {
    giveBack(client, error as Error);
    throw error;
  }
  return new PostgresTransaction(sql, client, Promise.resolve());
}

/**
 * While a request holds a connection (the endpoint's work runs meanwhile), a lost connection (a
 * restart, a killed backend) is an 'error' event on the client, which the pool does not listen
 * for on a checked-out client: unheard, it would end the process. Heard here, the next
 * statement fails and the connection is discarded when it is given back.
 */
const heldClients = new WeakMap<pg.PoolClient, { lost: Error | undefined; onLost: (error: Error) => void }>();

function hold(client: pg.PoolClient): pg.PoolClient {
  const state: { lost: Error | undefined; onLost: (error: Error) => void } = {
    lost: undefined,
    onLost: (error) => {
      state.lost ??= error;
    },
  };
  client.on('error', state.onLost);
  heldClients.set(client, state);
  return client;
}

function giveBack(client: pg.PoolClient, broken?: Error): void {
  const state = heldClients.get(client);
  if (state) {
    client.removeListener('error', state.onLost);
    heldClients.delete(client);
  }
  client.release(broken ?? state?.lost);
}

function settledVoid(): void {
  return undefined;
}

function ignore(): void {
  return undefined;
}

/** One pooled connection for one request (PostgresBackend.session). */
class PostgresSession extends PostgresKeyOperations implements BackendSession {
  private spent = false;

  constructor(
    sql: StoreStatements,
    private readonly client: pg.PoolClient,
    private readonly pooler?: PoolerMode,
  ) {
    super(sql, pooler ? new OwnTransactions({ client }) : client, client);
  }

  transaction(lockTimeoutMs: number): Promise<BackendTransaction> {
    if (this.spent) return Promise.reject(new Error('this session was released or its connection taken over'));
    this.spent = true;
    return beginOn(this.sql, this.client, lockTimeoutMs, this.pooler);
  }

  release(broken?: Error): void {
    if (this.spent) return;
    this.spent = true;
    giveBack(this.client, broken);
  }
}

/** One transaction on one pooled connection (PostgresBackend.transaction, or a session's). */
class PostgresTransaction extends PostgresKeyOperations implements BackendTransaction {
  constructor(
    sql: StoreStatements,
    private readonly client: pg.PoolClient,
    readonly begun: Promise<void>,
  ) {
    super(sql, client);
    // A rejected `begun` is the caller's to handle (it awaits it); this only keeps it from
    // counting as unhandled when the caller's own statement failed first.
    begun.catch(ignore);
  }

  async completeAndCommit(values: CompletionValues): Promise<void> {
    const { client } = this;
    if (!client.pipeline) {
      await this.sql.complete(client, values);
      await client.query('COMMIT');
      return;
    }
    // The COMMIT leaves behind the completion, in the same round trip (each has its own
    // Sync). Should the completion fail, the transaction is aborted and Postgres answers
    // the COMMIT by rolling back: nothing of the work stays, and the completion's error
    // is the one to report.
    const [completed, committed] = await Promise.allSettled([this.sql.complete(client, values), client.query('COMMIT')]);
    if (completed.status === 'rejected') throw completed.reason;
    if (committed.status === 'rejected') throw committed.reason;
  }

  async rollback(): Promise<void> {
    await this.client.query('ROLLBACK');
  }

  abandon(): void {
    const { client } = this;
    void client.query('ROLLBACK').then(
      () => giveBack(client),
      (error: unknown) => giveBack(client, error as Error),
    );
  }

  release(broken?: Error): void {
    giveBack(this.client, broken);
  }
}
