// A service whose data lives in MariaDB adopts the store as documented: createRetrysafe with
// `mysql: { uri }` (policies, flow metrics and the quota in Postgres), the Express and Fetch
// adapters, and an orders endpoint whose order row is written on the claim's transaction
// connection (transactional) or through the pool (claim-first). The HTTP status table holds as on
// Postgres: 201, byte-identical replays, 409 + Retry-After, 422, 413, 429 + Retry-After, 5xx not
// final, and a key of one principal invisible to another.
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { randomBytes, randomUUID } from 'node:crypto';
import express from 'express';
import type { Pool, RowDataPacket } from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRetrysafe, jsonResult, type ExecutionMode, type IdempotentRoute, type Principal, type Retrysafe, type WorkContext, type WorkResult } from '@retrysafe/store';
import { idempotent as expressIdempotent, problemErrors } from '@retrysafe/store/express';
import { idempotent as fetchIdempotent } from '@retrysafe/store/fetch';
import type { MysqlQueryable } from '@retrysafe/store/mysql';
import { useTestDatabase } from '../helpers/database';
import { hasMariaDb, useMariaDb } from '../helpers/mariadb';
import { testPolicy } from '../helpers/store';

const MAX_BODY = 1_024;
const QUOTA = 5;
const orderInput = z.object({ sku: z.string().min(1).max(64), quantity: z.number().int().positive() });
type Order = z.infer<typeof orderInput>;

interface Reply {
  status: number;
  headers: Headers;
  body: Buffer;
}

/** The orders endpoint's work: the order row in MariaDB through context.db; "slow-*" waits to be released, "flaky-*" fails its first run with a 503. */
class Orders {
  readonly runs = new Map<string, number>();
  private readonly gates = new Map<string, () => void>();

  work = async (input: Order, principal: Principal, context: WorkContext<MysqlQueryable>): Promise<WorkResult> => {
    const runs = (this.runs.get(input.sku) ?? 0) + 1;
    this.runs.set(input.sku, runs);
    if (input.sku.startsWith('slow-')) await new Promise<void>((release) => this.gates.set(input.sku, release));
    if (input.sku.startsWith('flaky-') && runs === 1) return jsonResult(503, { error: 'the warehouse is unreachable' });
    const id = randomUUID();
    await context.db.execute('INSERT INTO orders (id, principal_id, sku, quantity) VALUES (?, ?, ?, ?)', [id, principal.principalId, input.sku, input.quantity]);
    return jsonResult(201, { id, sku: input.sku, quantity: input.quantity });
  };

  release(sku: string): void {
    this.gates.get(sku)?.();
  }
}

const bearer = (value: string | null | undefined) => /^Bearer (\S+)$/.exec(value ?? '')?.[1] ?? null;

function route<Native>(orders: Orders, mode: ExecutionMode, principalOf: (request: Native) => string | null): IdempotentRoute<Order, Principal, Native, MysqlQueryable> {
  return {
    endpoint: 'POST /orders',
    method: 'POST',
    mode,
    policy: { ...testPolicy, liveKeyQuota: QUOTA, lockTimeoutMs: 1_000 },
    maxBodyBytes: MAX_BODY,
    authenticate: (request) => {
      const principalId = principalOf(request);
      return principalId ? { principalId } : null;
    },
    input: orderInput,
    work: (input, principal, context) => orders.work(input, principal, context),
  };
}

type Send = (init: { key?: string; body: string; principal: string }) => Promise<Reply>;

async function fromResponse(response: Response): Promise<Reply> {
  return { status: response.status, headers: response.headers, body: Buffer.from(await response.arrayBuffer()) };
}

function requestInit(init: { key?: string; body: string; principal: string }): { headers: Record<string, string>; body: string } {
  const headers: Record<string, string> = { 'content-type': 'application/json', authorization: `Bearer ${init.principal}` };
  if (init.key !== undefined) headers['idempotency-key'] = init.key;
  return { headers, body: init.body };
}

const order = (sku: string, quantity = 1) => JSON.stringify({ sku, quantity });

const cases = (['express', 'fetch'] as const).flatMap((adapter) => (['transactional', 'claim-first'] as const).map((mode) => ({ adapter, mode })));

describe.skipIf(!hasMariaDb)('createRetrysafe({ mysql }) behind the adapters', () => {
  const db = useTestDatabase();
  const mariadb = useMariaDb();
  let pool: Pool;

  beforeAll(async () => {
    pool = mariadb.server.pool(2);
    await pool.query('CREATE TABLE orders (id CHAR(36) PRIMARY KEY, principal_id CHAR(36) NOT NULL, sku VARCHAR(64) NOT NULL, quantity INT NOT NULL) ENGINE = InnoDB');
  });

  describe.each(cases)('$adapter adapter, $mode mode', ({ adapter, mode }) => {
    const orders = new Orders();
    let retrysafe: Retrysafe<MysqlQueryable>;
    let send: Send;
    let close: () => Promise<void> = () => Promise.resolve();

    beforeAll(async () => {
      retrysafe = await createRetrysafe({
        connectionString: db.url,
        mysql: { uri: mariadb.server.uri, maxConnections: 8 },
        service: `orders-${adapter}-${mode}`,
        fingerprintSecret: randomBytes(32),
        responseKeys: `k1:${randomBytes(32).toString('base64')}`,
        metricsFlushIntervalMs: 3_600_000,
      });
      if (adapter === 'express') {
        const app = express();
        app.post('/orders', express.json(), expressIdempotent(retrysafe.store, route(orders, mode, (req: express.Request) => bearer(req.headers.authorization))));
        app.use(problemErrors());
        const server = app.listen(0, '127.0.0.1');
        await once(server, 'listening');
        const { port } = server.address() as AddressInfo;
        send = async (init) => fromResponse(await fetch(`http://127.0.0.1:${port}/orders`, { method: 'POST', ...requestInit(init) }));
        close = () => new Promise((done) => server.close(() => done()));
      } else {
        const handle = fetchIdempotent(retrysafe.store, route(orders, mode, (request: Request) => bearer(request.headers.get('authorization'))));
        send = async (init) => fromResponse(await handle(new Request('http://orders.test/orders', { method: 'POST', ...requestInit(init) })));
      }
    });
    afterAll(async () => {
      await close();
      await retrysafe.stop();
    });

    const ordersOf = async (principalId: string) => {
      const [rows] = await pool.query<(RowDataPacket & { sku: string })[]>('SELECT sku FROM orders WHERE principal_id = ? ORDER BY sku', [principalId]);
      return rows.map((row) => row.sku);
    };

    it('answers 201, then replays byte for byte with the original correlation id; another principal’s same key is its own', async () => {
      const alice = randomUUID();
      const first = await send({ key: 'order-1', body: order('sku-1', 2), principal: alice });
      expect(first.status).toBe(201);
      expect(first.headers.get('idempotent-replayed')).toBeNull();
      const replay = await send({ key: 'order-1', body: '{ "quantity": 2, "sku": "sku-1" }', principal: alice });
      expect(replay.status).toBe(201);
      expect(replay.body.equals(first.body)).toBe(true);
      expect(replay.headers.get('content-type')).toBe('application/json');
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.headers.get('x-correlation-id')).toBe(first.headers.get('x-correlation-id'));
      const bob = randomUUID();
      const bobs = await send({ key: 'order-1', body: order('sku-1', 2), principal: bob });
      expect(bobs.status).toBe(201);
      expect(bobs.headers.get('idempotent-replayed')).toBeNull();
      expect(bobs.body.equals(first.body)).toBe(false);
      expect(await ordersOf(alice)).toEqual(['sku-1']);
      expect(await ordersOf(bob)).toEqual(['sku-1']);
    });

    it('answers 409 with Retry-After while the original is still running', async () => {
      const p = randomUUID();
      const original = send({ key: 'order-slow', body: order('slow-1'), principal: p });
      await expect.poll(() => orders.runs.get('slow-1') ?? 0).toBe(1);
      const duplicate = await send({ key: 'order-slow', body: order('slow-1'), principal: p });
      expect(duplicate.status).toBe(409);
      expect(duplicate.headers.get('content-type')).toBe('application/problem+json');
      expect(Number(duplicate.headers.get('retry-after'))).toBeGreaterThan(0);
      orders.release('slow-1');
      expect((await original).status).toBe(201);
      expect(orders.runs.get('slow-1')).toBe(1);
      expect(await ordersOf(p)).toEqual(['slow-1']);
    });

    it('answers 422 for the key with another body, 400 for a bad key, 413 over the cap, and runs nothing', async () => {
      const p = randomUUID();
      expect((await send({ key: 'order-2', body: order('sku-2', 1), principal: p })).status).toBe(201);
      const reused = await send({ key: 'order-2', body: order('sku-2', 5), principal: p });
      expect(reused.status).toBe(422);
      expect(JSON.parse(reused.body.toString('utf8'))).toMatchObject({ type: 'urn:retrysafe:problem:key-reused', status: 422 });
      expect((await send({ key: 'has space', body: order('sku-3'), principal: p })).status).toBe(400);
      expect((await send({ key: 'order-4', body: order(`big-${'x'.repeat(MAX_BODY)}`), principal: p })).status).toBe(413);
      expect(orders.runs.get('sku-2')).toBe(1);
      expect(orders.runs.get('sku-3')).toBeUndefined();
      expect(await ordersOf(p)).toEqual(['sku-2']);
    });

    it('does not keep a 5xx as final: the retry runs the work again', async () => {
      const p = randomUUID();
      const failed = await send({ key: 'order-5', body: order('flaky-1'), principal: p });
      expect(failed.status).toBe(503);
      const retried = await send({ key: 'order-5', body: order('flaky-1'), principal: p });
      expect(retried.status).toBe(201);
      expect(retried.headers.get('idempotent-replayed')).toBeNull();
      expect(orders.runs.get('flaky-1')).toBe(2);
      expect(await ordersOf(p)).toEqual(['flaky-1']);
    });

    it('answers 429 with Retry-After past the live-key quota, and still replays an existing key', async () => {
      const p = randomUUID();
      for (let index = 0; index < QUOTA; index += 1) expect((await send({ key: `quota-${index}`, body: order(`q-${index}`), principal: p })).status).toBe(201);
      const refused = await send({ key: 'quota-over', body: order('q-over'), principal: p });
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
      const replay = await send({ key: 'quota-0', body: order('q-0'), principal: p });
      expect([replay.status, replay.headers.get('idempotent-replayed')]).toEqual([201, 'true']);
      expect((await ordersOf(p)).length).toBe(QUOTA);
    });
  });
});
