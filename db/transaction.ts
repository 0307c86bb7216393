// Transactions on pooled connections: COMMIT when `run` returns, ROLLBACK when it throws, and
// a connection whose ROLLBACK failed (it died, or is stuck mid-transaction) marked broken, so
// that it is discarded instead of handed back to the pool for the next caller to inherit.
import type pg from 'pg';

export interface Connectable {
  connect(): Promise<Pick<pg.PoolClient, 'query' | 'release'>>;
}

/** A connection a caller holds across several transactions, and whether one left it unusable. */
export interface HeldConnection {
  client: Pick<pg.PoolClient, 'query'>;
  /** Set when a ROLLBACK failed: release the connection with it (pg-pool then discards it). */
  broken?: Error;
}

/** One transaction on a held connection; `begin` may set transaction-local settings (e.g. lock_timeout). */
export async function transactionOn<T>(held: HeldConnection, run: (db: Pick<pg.PoolClient, 'query'>) => Promise<T>, begin = 'BEGIN'): Promise<T> {
  try {
    // Inside the try: a BEGIN that opened the transaction and then failed (its SET LOCAL) is rolled back too.
    await held.client.query(begin);
    const result = await run(held.client);
    await held.client.query('COMMIT');
    return result;
  } catch (error) {
    await held.client.query('ROLLBACK').catch((rollbackError: unknown) => (held.broken = rollbackError as Error));
    throw error;
  }
}

/** BEGIN with a transaction-local lock_timeout: waits on a row lock end after `ms`. */
export function beginWithLockTimeout(ms: number): string {
  if (!Number.isFinite(ms)) throw new RangeError(`lock timeout must be a number of milliseconds, not ${ms}`);
  return `BEGIN; SET LOCAL lock_timeout = ${Math.max(1, Math.round(ms))}`;
}

/** A read-only transaction on one snapshot (consistent across its statements; runs on a hot standby too). */
export const BEGIN_READ_ONLY_SNAPSHOT = 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY';

export async function inTransaction<T>(pool: Connectable, run: (db: Pick<pg.PoolClient, 'query'>) => Promise<T>, begin = 'BEGIN'): Promise<T> {
  const client = await pool.connect();
  const held: HeldConnection = { client };
  try {
    return await transactionOn(held, run, begin);
  } finally {
    client.release(held.broken);
  }
}
