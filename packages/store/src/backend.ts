// The store's persistence seam. IdempotencyStore decides (replay, mismatch, conflict, takeover),
// fingerprints, seals and reports; everything it keeps goes through an IdempotencyBackend: the
// five operations on one scoped key, outside a transaction (claim-first) or inside one whose
// claims wait a bounded time for a concurrent holder (transactional). The adapters and the HTTP
// semantics sit on IdempotencyStore alone, so another backend is one more implementation of
// this interface. Postgres is the first (PostgresBackend, below; the statements in statements.ts).
import type pg from 'pg';
import {
  statementsFor,
  type ClaimResult,
  type ClaimValues,
  type CompletionValues,
  type ExistingKey,
  type KeyIdentity,
  type Queryable,
  type StoreStatements,
} from './statements.js';

/** The five operations on one scoped key, bound to where they run (outside or inside a transaction). */
export interface KeyOperations {
  /**
   * Inserts the key as in progress, unless it exists: then `existing` is its row when this
   * operation could see it (null: read it afresh). Atomic against concurrent claims of the key.
   */
  claim(claim: ClaimValues): Promise<ClaimResult>;
  read(id: KeyIdentity): Promise<ExistingKey | null>;
  /** Takes over an expired, failed or lease-expired key if its attempt number is still `seenAttempts`; the new number, or null. */
  takeOver(claim: ClaimValues, seenAttempts: number): Promise<number | null>;
  /** Records the response if attempt `values.attempts` still holds the claim. */
  complete(values: CompletionValues): Promise<boolean>;
  /** Marks attempt `attempts` failed and retryable, if it still holds the claim. */
  fail(id: KeyIdentity, attempts: number): Promise<boolean>;
  /** What the endpoint's work and re-derivation get as `context.db`. */
  readonly db: Queryable;
}

/** A transaction: the work's effects and the key's completion commit together or not at all. */
export interface BackendTransaction extends KeyOperations {
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
export interface BackendSession extends KeyOperations {
  /**
   * Starts a transaction on this session's connection, as IdempotencyBackend.transaction does.
   * The transaction then owns the connection (its release() gives it back): the session is spent
   * and must not be released or used again, whether this succeeds or throws.
   */
  transaction(lockTimeoutMs: number): Promise<BackendTransaction>;
  /** Gives the connection back unless a transaction took it over; `broken` discards it. */
  release(broken?: Error): void;
}

export interface IdempotencyBackend extends KeyOperations {
  /**
   * Starts a transaction in which a claim or takeover that meets a concurrent holder of the key
   * waits at most `lockTimeoutMs`, then fails with an error isLockTimeout recognises.
   */
  transaction(lockTimeoutMs: number): Promise<BackendTransaction>;
  /** Whether an operation failed because it waited its lock timeout out (a 409, not a 500). */
  isLockTimeout(error: unknown): boolean;
  /**
   * Optional: one connection for a transactional request's read of the committed row and its
   * transaction, where the backend pools connections (Postgres: one pool checkout instead of two).
   * Without it the store reads and begins separately, with the same round trips.
   */
  session?(): Promise<BackendSession>;
}

const LOCK_NOT_AVAILABLE = '55P03';

/** The five key operations, each one of the layout's statements on one connection or pool. */
abstract class PostgresKeyOperations implements KeyOperations {
  constructor(
    protected readonly sql: StoreStatements,
    private readonly on: Queryable,
  ) {}

  get db(): Queryable {
    return this.on;
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
  constructor(
    private readonly pool: pg.Pool,
    layout: 'plain' | 'partitioned' = 'plain',
  ) {
    super(statementsFor(layout), pool);
  }

  isLockTimeout(error: unknown): boolean {
    return (error as { code?: unknown } | null)?.code === LOCK_NOT_AVAILABLE;
  }

  async transaction(lockTimeoutMs: number): Promise<BackendTransaction> {
    return beginOn(this.sql, hold(await this.pool.connect()), lockTimeoutMs);
  }

  /** A pooled connection for one request (its read, then its transaction): one checkout. */
  async session(): Promise<BackendSession> {
    return new PostgresSession(this.sql, hold(await this.pool.connect()));
  }
}

/** Begins a transaction on a checked-out connection, which the transaction then owns (released with it, or here on failure). */
async function beginOn(sql: StoreStatements, client: pg.PoolClient, lockTimeoutMs: number): Promise<BackendTransaction> {
  const begin = `BEGIN; SET LOCAL lock_timeout = ${Math.max(1, Math.round(lockTimeoutMs))}`;
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
  ) {
    super(sql, client);
  }

  transaction(lockTimeoutMs: number): Promise<BackendTransaction> {
    if (this.spent) return Promise.reject(new Error('this session was released or its connection taken over'));
    this.spent = true;
    return beginOn(this.sql, this.client, lockTimeoutMs);
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
