// The example service's MySQL variant as an outside team runs it (#28 point 7): the tarball,
// express and mysql2 installed into an empty project, the key table migrated with the installed
// package's `npx retrysafe migrate --mysql`, and `node server.mjs` with BACKEND=mysql against a
// MariaDB of this file's own. Each order row is written on the claim's transaction connection, so
// the order and its key commit together: a replay is byte-identical, 64 concurrent duplicates
// make one order, and a process SIGKILLed inside the work leaves neither order nor key behind.
import { randomUUID } from 'node:crypto';
import type { Pool, PoolConnection, RowDataPacket } from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers/database';
import { installExample, type ExampleProject, type RunningExample } from '../helpers/example-service';
import { hasMariaDb, startMariaDb, type MariaDb } from '../../packages/store/test/helpers/mariadb';

describe.skipIf(!hasMariaDb)('examples/orders-express with BACKEND=mysql, from the tarball', () => {
  const db = useTestDatabase();
  let mariadb: MariaDb | undefined;
  let project: ExampleProject | undefined;
  let example: RunningExample | undefined;
  let pool: Pool;
  let env: Record<string, string>;

  beforeAll(async () => {
    mariadb = await startMariaDb();
    pool = mariadb.pool(4);
    project = await installExample(['mysql2@3.26.1']);
    const migrated = (await project.retrysafe(['migrate', '--mysql', mariadb.uri], {})) as { applied: string[] };
    expect(migrated.applied).toContain('0001_idempotency_keys');
    env = { DATABASE_URL: db.url, BACKEND: 'mysql', MYSQL_URL: mariadb.uri };
    example = await project.start(env);
  }, 600_000);

  afterAll(async () => {
    await project?.remove();
    await mariadb?.stop();
  }, 120_000);

  const order = (key: string, body: unknown, principalId: string) =>
    fetch(example?.ordersUrl ?? '', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${principalId}`, 'idempotency-key': key },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
  const ordersOf = async (principalId: string) => {
    const [rows] = await pool.query<(RowDataPacket & { id: string; sku: string })[]>('SELECT id, sku FROM orders WHERE principal_id = ?', [principalId]);
    return rows.map((row) => ({ id: row.id, sku: row.sku }));
  };
  const keysOf = async (principalId: string) => {
    const [rows] = await pool.query<(RowDataPacket & { state: string; attempts: number })[]>('SELECT state, attempts FROM retrysafe_idempotency_keys WHERE principal_id = ?', [principalId]);
    return rows.map((row) => ({ state: row.state, attempts: row.attempts }));
  };

  it('answers a new order 201 with its row in MariaDB, replays it byte for byte, and refuses another body with 422', async () => {
    const principal = randomUUID();
    const first = await order('order-1', { sku: 'BOOK-1', quantity: 2 }, principal);
    expect(first.status).toBe(201);
    const firstBody = await first.text();
    const created = JSON.parse(firstBody) as { id: string };
    expect(created).toMatchObject({ sku: 'BOOK-1', quantity: 2, id: expect.any(String) as string });
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(await ordersOf(principal)).toEqual([{ id: created.id, sku: 'BOOK-1' }]);
    expect(await keysOf(principal)).toEqual([{ state: 'completed', attempts: 1 }]);

    const retry = await order('order-1', '{ "quantity": 2,  "sku": "BOOK-1" }', principal);
    expect(retry.status).toBe(201);
    expect(await retry.text()).toBe(firstBody);
    expect(retry.headers.get('content-type')).toBe(first.headers.get('content-type'));
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.headers.get('x-correlation-id')).toBe(first.headers.get('x-correlation-id'));

    const reused = await order('order-1', { sku: 'BOOK-1', quantity: 3 }, principal);
    expect(reused.status).toBe(422);
    expect(reused.headers.get('content-type')).toContain('application/problem+json');
    expect(await ordersOf(principal)).toHaveLength(1);
    // The key lives in MariaDB, not in the Retrysafe Postgres.
    const inPostgres = await db.pool.query('SELECT 1 FROM idempotency_keys WHERE principal_id = $1', [principal]);
    expect(inPostgres.rowCount).toBe(0);
  });

  it('makes one order of 64 concurrent identical requests; the others replay it or answer 409 with Retry-After', async () => {
    const principal = randomUUID();
    const burst = await Promise.all(Array.from({ length: 64 }, () => order('order-burst', { sku: 'PEN-9', quantity: 1 }, principal)));
    const bodies = await Promise.all(burst.map((response) => response.text()));
    const created = burst.filter((response) => response.status === 201 && response.headers.get('idempotent-replayed') !== 'true');
    expect(created).toHaveLength(1);
    const original = bodies[burst.indexOf(created[0] as Response)];
    for (const [index, response] of burst.entries()) {
      expect([201, 409]).toContain(response.status);
      if (response.status === 409) expect(Number(response.headers.get('retry-after'))).toBeGreaterThan(0);
      if (response.status === 201) expect(bodies[index]).toBe(original);
    }
    expect(await ordersOf(principal)).toEqual([{ id: (JSON.parse(original ?? '{}') as { id: string }).id, sku: 'PEN-9' }]);
    expect(await keysOf(principal)).toEqual([{ state: 'completed', attempts: 1 }]);
  });

  it('leaves no order and no key when the process is SIGKILLed inside the work (the transaction rolls back); the retry makes exactly one', async () => {
    const principal = randomUUID();
    // Hold the orders table: the work's INSERT (after the claim, in its transaction) waits there.
    const holder: PoolConnection = await pool.getConnection();
    let blocked = 0;
    try {
      await holder.query('LOCK TABLES orders WRITE');
      const doomed = order('order-crash', { sku: 'LAMP-3', quantity: 1 }, principal).catch((error: unknown) => error);
      const waiting = async () => {
        const [rows] = await pool.query<(RowDataPacket & { id: number })[]>("SELECT id FROM information_schema.processlist WHERE info LIKE 'INSERT INTO orders%'");
        return rows[0]?.id ?? 0;
      };
      await expect.poll(waiting, { timeout: 30_000, interval: 50 }).toBeGreaterThan(0);
      blocked = await waiting();
      await example?.kill();
      expect(await doomed).toBeInstanceOf(Error); // the connection died with the process
    } finally {
      await holder.query('UNLOCK TABLES');
      holder.release();
    }
    // Released, the orphaned INSERT runs; the server then finds its client gone and rolls its
    // transaction back. Once that connection's thread is gone, nothing of the request remains.
    const threadGone = async () => {
      const [rows] = await pool.query<RowDataPacket[]>('SELECT 1 FROM information_schema.processlist WHERE id = ?', [blocked]);
      return rows.length;
    };
    await expect.poll(threadGone, { timeout: 60_000, interval: 50 }).toBe(0);
    expect(await ordersOf(principal)).toEqual([]);
    expect(await keysOf(principal)).toEqual([]);

    example = await project?.start(env);
    const retry = await order('order-crash', { sku: 'LAMP-3', quantity: 1 }, principal);
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    const again = await order('order-crash', { sku: 'LAMP-3', quantity: 1 }, principal);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await ordersOf(principal)).toEqual([{ id: (JSON.parse(await retry.text()) as { id: string }).id, sku: 'LAMP-3' }]);
    expect(await keysOf(principal)).toEqual([{ state: 'completed', attempts: 1 }]);
  }, 120_000);
});
