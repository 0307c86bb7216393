// A connection whose ROLLBACK failed is discarded, never handed to the next caller.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type pg from 'pg';
import { createPool } from '../../db/client';
import { beginWithLockTimeout, inTransaction, transactionOn, type HeldConnection } from '../../db/transaction';
import { useTestDatabase } from '../helpers/database';
import { captureLog } from '../helpers/log-capture';
import { logConnectionLost } from '../../server/logging';

describe('transactions on pooled connections', () => {
  const db = useTestDatabase();
  // The product's pool: a connection lost while checked out is reported, not an unhandled error.
  let pool: pg.Pool;
  beforeAll(() => {
    pool = createPool(db.url, { applicationName: 'transaction-test', max: 2 });
  });
  afterAll(async () => {
    await pool.end();
  });

  const pidOf = async (query: HeldConnection['client']['query']) => (await query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;

  it("tells onConnectionLost of an idle connection killed under it, which the server logs described: its SQLSTATE, not its message", async () => {
    const { log, lines } = captureLog();
    const watched = createPool(db.url, { applicationName: 'lost-connection-test', max: 1, onConnectionLost: (error, name) => { logConnectionLost(error, name, log); } });
    try {
      const pid = (await watched.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
      await pool.query('SELECT pg_terminate_backend($1)', [pid]);
      await vi.waitFor(() => { expect(lines.length).toBeGreaterThan(0); });
      expect(JSON.parse(lines[0] ?? '')).toMatchObject({ level: 'warn', msg: 'database connection lost', pool: 'lost-connection-test', error: { sqlstate: '57P01' } });
      // The server's message ('terminating connection due to administrator command') stays out.
      expect(lines.join('')).not.toMatch(/terminating/);
      // The pool lives on: the next statement gets a new connection.
      expect((await watched.query<{ n: number }>('SELECT 1 AS n')).rows[0]?.n).toBe(1);
    } finally {
      await watched.end();
    }
  });

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

  it('rolls back a BEGIN whose SET LOCAL failed, so the connection goes back out of any transaction', async () => {
    const client = await pool.connect();
    const held: HeldConnection = { client };
    await expect(transactionOn(held, () => Promise.resolve(1), "BEGIN; SET LOCAL lock_timeout = 'not a duration'")).rejects.toThrow();
    expect(held.broken).toBeUndefined();
    // Not left in an aborted transaction: an ordinary statement runs.
    expect((await client.query<{ n: number }>('SELECT 1 AS n')).rows[0]?.n).toBe(1);
    client.release(held.broken);
    expect(() => beginWithLockTimeout(Number.NaN)).toThrow(RangeError);
  });

  it('keeps the store\'s session settings when the connection string has options of its own', async () => {
    const url = new URL(db.url);
    url.searchParams.set('options', '-c work_mem=5MB');
    const store = createPool(url.toString(), { applicationName: 'store-test', max: 1, client: { options: '-c enable_seqscan=off' } });
    try {
      const { rows } = await store.query<{ seqscan: string; mem: string }>("SELECT current_setting('enable_seqscan') AS seqscan, current_setting('work_mem') AS mem");
      expect(rows[0]).toEqual({ seqscan: 'off', mem: '5MB' });
    } finally {
      await store.end();
    }
  });
});

