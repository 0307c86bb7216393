// One transaction on a pooled connection: COMMIT when `run` returns, ROLLBACK when it
// throws, and the connection back to the pool (discarded if even ROLLBACK failed).
import type pg from 'pg';

export interface Connectable {
  connect(): Promise<Pick<pg.PoolClient, 'query' | 'release'>>;
}

export async function inTransaction<T>(pool: Connectable, run: (db: Pick<pg.PoolClient, 'query'>) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query('BEGIN');
    const result = await run(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch((rollbackError: unknown) => (broken = rollbackError as Error));
    throw error;
  } finally {
    client.release(broken);
  }
}
