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

export interface IdempotencyBackend extends KeyOperations {
  /**
   * Starts a transaction in which a claim or takeover that meets a concurrent holder of the key
   * waits at most `lockTimeoutMs`, then fails with an error isLockTimeout recognises.
   */
  transaction(lockTimeoutMs: number): Promise<BackendTransaction>;
  /** Whether an operation failed because it waited its lock timeout out (a 409, not a 500). */
  isLockTimeout(error: unknown): boolean;
}

const LOCK_NOT_AVAILABLE = '55P03';

function operationsOn(sql: StoreStatements, db: Queryable): KeyOperations {
  return {
    db,
    claim: (claim) => sql.claim(db, claim),
    read: (id) => sql.read(db, id),
    takeOver: (claim, seen) => sql.takeOver(db, claim, seen),
    complete: (values) => sql.complete(db, values),
    fail: (id, attempts) => sql.fail(db, id, attempts),
  };
}

/**
 * Postgres: the statements of the key table's layout (statements.ts), on the store's pool. A
 * transaction holds one pooled connection; on a pipelined pool (STORE_POOL_SETTINGS) its BEGIN
 * (with SET LOCAL lock_timeout) and the first claim leave in one round trip, and a rollback is
 * sent without waiting for it.
 */
export class PostgresBackend implements IdempotencyBackend {
  private readonly sql: StoreStatements;
  private readonly outside: KeyOperations;

  constructor(
    private readonly pool: pg.Pool,
    layout: 'plain' | 'partitioned' = 'plain',
  ) {
    this.sql = statementsFor(layout);
    this.outside = operationsOn(this.sql, pool);
  }

  get db(): Queryable {
    return this.pool;
  }

  claim(claim: ClaimValues): Promise<ClaimResult> {
    return this.outside.claim(claim);
  }

  read(id: KeyIdentity): Promise<ExistingKey | null> {
    return this.outside.read(id);
  }

  takeOver(claim: ClaimValues, seenAttempts: number): Promise<number | null> {
    return this.outside.takeOver(claim, seenAttempts);
  }

  complete(values: CompletionValues): Promise<boolean> {
    return this.outside.complete(values);
  }

  fail(id: KeyIdentity, attempts: number): Promise<boolean> {
    return this.outside.fail(id, attempts);
  }

  isLockTimeout(error: unknown): boolean {
    return (error as { code?: unknown } | null)?.code === LOCK_NOT_AVAILABLE;
  }

  async transaction(lockTimeoutMs: number): Promise<BackendTransaction> {
    const client = await this.pool.connect();
    // While the transaction holds its connection (the endpoint's work runs meanwhile), a lost
    // connection (a restart, a killed backend) is an 'error' event on the client, which the
    // pool does not listen for on a checked-out client: unheard, it would end the process.
    // Heard here, the next statement fails and the connection is discarded at release.
    let lost: Error | undefined;
    const onLost = (error: Error) => {
      lost ??= error;
    };
    client.on('error', onLost);
    const giveBack = (broken?: Error) => {
      client.removeListener('error', onLost);
      client.release(broken ?? lost);
    };
    const begin = `BEGIN; SET LOCAL lock_timeout = ${Math.max(1, Math.round(lockTimeoutMs))}`;
    // Not pipelined: wait for the BEGIN before anything else is sent on the connection.
    const begun = client.pipeline ? client.query(begin).then(() => undefined) : undefined;
    if (!begun) {
      try {
        await client.query(begin);
      } catch (error) {
        giveBack(error as Error);
        throw error;
      }
    }
    // A rejected `begun` is the caller's to handle (it awaits it); this only keeps it from
    // counting as unhandled when the caller's own statement failed first.
    begun?.catch(() => undefined);
    return {
      ...operationsOn(this.sql, client),
      begun: begun ?? Promise.resolve(),
      completeAndCommit: async (values) => {
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
      },
      rollback: async () => {
        await client.query('ROLLBACK');
      },
      abandon: () => {
        void client.query('ROLLBACK').then(
          () => giveBack(),
          (error: unknown) => giveBack(error as Error),
        );
      },
      release: (broken?: Error) => giveBack(broken),
    };
  }
}
