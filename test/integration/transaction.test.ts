// A connection whose ROLLBACK failed is discarded, never handed to the next caller.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { createPool } from '../../db/client';
import { inTransaction, transactionOn, type HeldConnection } from '../../db/transaction';
import { useTestDatabase } from '../helpers/database';

describe('transactions on pooled connections', () => {
  const db = useTestDatabase();
  // The product's pool: a connection lost while checked out is logged, not an unhandled error.
  let pool: pg.Pool;
  beforeAll(() => {
    pool = createPool(db.url, { applicationName: 'transaction-test', max: 2 });
  });
  afterAll(async () => {
    await pool.end();
  });

  const pidOf = async (query: HeldConnection['client']['query']) => (await query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;

  it('commits, rolls back, and keeps a healthy connection after a rollback', async () => {
    const client = await pool.connect();
    const held: HeldConnection = { client };
    await expect(transactionOn(held, async (tx) => { await tx.query('SELECT 1/0'); })).rejects.toThrow(/division by zero/);
    expect(held.broken).toBeUndefined();
    expect(await transactionOn(held, async (tx) => (await tx.query<{ n: number }>('SELECT 1 AS n')).rows[0]?.n)).toBe(1);
    client.release(held.broken);
  });

  it('marks the connection broken when the ROLLBACK fails, and the pool then discards it', async () => {
    const client = await pool.connect();
    const held: HeldConnection = { client };
    const pid = await pidOf(client.query.bind(client));
    // The backend dies mid-transaction: the statement fails, and so does the ROLLBACK.
    await expect(transactionOn(held, async (tx) => { await tx.query('SELECT pg_terminate_backend(pg_backend_pid())'); })).rejects.toThrow();
    expect(held.broken).toBeInstanceOf(Error);
    client.release(held.broken);
    const again = await pool.connect();
    try {
      expect(await pidOf(again.query.bind(again))).not.toBe(pid);
    } finally {
      again.release();
    }
  });

  it('inTransaction discards such a connection too', async () => {
    await expect(inTransaction(pool, async (tx) => { await tx.query('SELECT pg_terminate_backend(pg_backend_pid())'); })).rejects.toThrow();
    expect(await inTransaction(pool, async (tx) => (await tx.query<{ n: number }>('SELECT 1 AS n')).rows[0]?.n)).toBe(1);
  });
});
