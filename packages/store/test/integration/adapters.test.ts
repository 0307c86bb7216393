// Every framework adapter, against the real framework, answers the contract's status table:
// 201; a replay byte-identical with Idempotent-Replayed and the original correlation id; 409
// with Retry-After while the original runs; 422 for another body; 400 for a malformed key;
// 413 over the cap; a 5xx that is not final (the retry runs the work again). Express and
// Fastify are served over real sockets; Hono, Next and the Fetch adapter are called through
// their own request objects (Hono's app.fetch, a NextRequest). Each on both key-record backends:
// Postgres, and Redis (claim-first, the mode these routes use).
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import express from 'express';
import Fastify from 'fastify';
import { Hono } from 'hono';
import { NextRequest } from 'next/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { jsonResult, type IdempotencyStore, type IdempotentRoute, type Principal, type WorkContext, type WorkResult } from '@retrysafe/store';
import { idempotent as expressIdempotent, problemErrors } from '@retrysafe/store/express';
import { idempotent as fastifyIdempotent } from '@retrysafe/store/fastify';
import { idempotent as fetchIdempotent } from '@retrysafe/store/fetch';
import { idempotent as honoIdempotent } from '@retrysafe/store/hono';
import { idempotentRoute } from '@retrysafe/store/next';
import { useTestDatabase } from '../helpers/database';
import { createTestStore, testPolicy } from '../helpers/store';
import { keyBackendKinds, useKeyBackend } from '../helpers/store-backends';

interface Reply {
  status: number;
  headers: Headers;
  body: Buffer;
}

interface Served {
  send: (init: { key?: string; body: string; principal?: string }) => Promise<Reply>;
  close: () => Promise<void>;
}

const orderInput = z.object({ sku: z.string().min(1).max(64), quantity: z.number().int().positive() });
type Order = z.infer<typeof orderInput>;

/** The work of every adapter's endpoint: counts runs per SKU; "slow-*" waits to be released, "flaky-*" fails its first run with a 503. */
class Orders {
  readonly runs = new Map<string, number>();
  private readonly gates = new Map<string, () => void>();

  work = async (input: Order, principal: Principal, context: WorkContext): Promise<WorkResult> => {
    const runs = (this.runs.get(input.sku) ?? 0) + 1;
    this.runs.set(input.sku, runs);
    if (input.sku.startsWith('slow-')) await new Promise<void>((release) => this.gates.set(input.sku, release));
    if (input.sku.startsWith('flaky-') && runs === 1) return jsonResult(503, { error: 'the warehouse is unreachable' });
    return jsonResult(201, { id: randomUUID(), sku: input.sku, quantity: input.quantity, principal: principal.principalId, correlationId: context.correlationId });
  };

  release(sku: string): void {
    this.gates.get(sku)?.();
  }
}

const MAX_BODY = 1_024;

function route<Native>(orders: Orders, principalOf: (request: Native) => string | null): IdempotentRoute<Order, Principal, Native> {
  return {
    endpoint: 'POST /orders',
    method: 'POST',
    mode: 'claim-first',
    policy: testPolicy,
    maxBodyBytes: MAX_BODY,
    authenticate: (request) => {
      const principalId = principalOf(request);
      return principalId ? { principalId } : null;
    },
    input: orderInput,
    work: (input, principal, context) => orders.work(input, principal, context),
  };
}

const bearer = (value: string | null | undefined) => /^Bearer (\S+)$/.exec(value ?? '')?.[1] ?? null;

function requestInit(init: { key?: string; body: string; principal?: string }, principal: string): { headers: Record<string, string>; body: string } {
  const headers: Record<string, string> = { 'content-type': 'application/json', authorization: `Bearer ${init.principal ?? principal}` };
  if (init.key !== undefined) headers['idempotency-key'] = init.key;
  return { headers, body: init.body };
}

async function fromResponse(response: Response): Promise<Reply> {
  return { status: response.status, headers: response.headers, body: Buffer.from(await response.arrayBuffer()) };
}

type Adapter = (store: IdempotencyStore, orders: Orders, principal: string) => Served | Promise<Served>;

const adapters: Record<string, Adapter> = {
  express: async (store, orders, principal) => {
    const app = express();
    app.post('/orders', express.json(), expressIdempotent(store, route(orders, (req: express.Request) => bearer(req.headers.authorization))));
    app.use(problemErrors());
    const server = app.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    return {
      send: async (init) => fromResponse(await fetch(`http://127.0.0.1:${port}/orders`, { method: 'POST', ...requestInit(init, principal) })),
      close: () => new Promise((done) => server.close(() => done())),
    };
  },
  fastify: async (store, orders, principal) => {
    const app = Fastify();
    app.post('/orders', fastifyIdempotent(store, route(orders, (request: import('fastify').FastifyRequest) => bearer(request.headers.authorization))));
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as AddressInfo;
    return {
      send: async (init) => fromResponse(await fetch(`http://127.0.0.1:${port}/orders`, { method: 'POST', ...requestInit(init, principal) })),
      close: () => app.close(),
    };
  },
  hono: (store, orders, principal) => {
    const app = new Hono();
    app.post('/orders', honoIdempotent(store, route(orders, (c: import('hono').Context) => bearer(c.req.header('authorization')))));
    return {
      send: async (init) => fromResponse(await app.fetch(new Request('http://orders.test/orders', { method: 'POST', ...requestInit(init, principal) }))),
      close: () => Promise.resolve(),
    };
  },
  next: (store, orders, principal) => {
    const POST = idempotentRoute(store, route(orders, (request: NextRequest) => bearer(request.headers.get('authorization'))));
    return {
      send: async (init) => fromResponse(await POST(new NextRequest('http://orders.test/orders', { method: 'POST', ...requestInit(init, principal) }), { params: Promise.resolve({}) })),
      close: () => Promise.resolve(),
    };
  },
  fetch: (store, orders, principal) => {
    const handle = fetchIdempotent(store, route(orders, (request: Request) => bearer(request.headers.get('authorization'))));
    return {
      send: async (init) => fromResponse(await handle(new Request('http://orders.test/orders', { method: 'POST', ...requestInit(init, principal) }))),
      close: () => Promise.resolve(),
    };
  },
};

const order = (sku: string, quantity = 1) => JSON.stringify({ sku, quantity });

// Every adapter with its keys in Postgres, and in Redis (where a redis-server is installed).
const cases = keyBackendKinds.flatMap((kind) => Object.keys(adapters).map((name) => ({ name, kind })));

describe.each(cases)('$name adapter, keys in $kind', ({ name, kind }) => {
  const db = useTestDatabase();
  const keys = useKeyBackend(kind, db);
  const orders = new Orders();
  const principal = randomUUID();
  let served: Served;

  beforeAll(async () => {
    const adapter = adapters[name];
    if (!adapter) throw new Error(`no adapter ${name}`);
    served = await adapter(createTestStore(db.pool, { backend: keys.backend() }).store, orders, principal);
  });
  afterAll(() => served.close());

  it('answers 201 for a new key, then replays it byte for byte with the original correlation id', async () => {
    const first = await served.send({ key: 'order-1', body: order('sku-1', 2) });
    expect(first.status).toBe(201);
    expect(first.headers.get('content-type')).toBe('application/json');
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const created = JSON.parse(first.body.toString('utf8')) as { sku: string; quantity: number; principal: string };
    expect(created).toMatchObject({ sku: 'sku-1', quantity: 2, principal });

    // Key order and whitespace do not change the fingerprint.
    const replay = await served.send({ key: 'order-1', body: '{ "quantity": 2, "sku": "sku-1" }' });
    expect(replay.status).toBe(201);
    expect(replay.body.equals(first.body)).toBe(true);
    expect(replay.headers.get('content-type')).toBe('application/json');
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.headers.get('x-correlation-id')).toBe(first.headers.get('x-correlation-id'));
    expect(orders.runs.get('sku-1')).toBe(1);
  });

  it('answers 409 with Retry-After while the original is still running', async () => {
    const original = served.send({ key: 'order-slow', body: order('slow-1') });
    await expect.poll(() => orders.runs.get('slow-1') ?? 0).toBe(1);
    const duplicate = await served.send({ key: 'order-slow', body: order('slow-1') });
    expect(duplicate.status).toBe(409);
    expect(duplicate.headers.get('content-type')).toBe('application/problem+json');
    expect(Number(duplicate.headers.get('retry-after'))).toBeGreaterThan(0);
    orders.release('slow-1');
    expect((await original).status).toBe(201);
    expect(orders.runs.get('slow-1')).toBe(1);
  });

  it('answers 422 when the key comes back with another body, and runs nothing', async () => {
    expect((await served.send({ key: 'order-2', body: order('sku-2', 1) })).status).toBe(201);
    const reused = await served.send({ key: 'order-2', body: order('sku-2', 5) });
    expect(reused.status).toBe(422);
    expect(reused.headers.get('content-type')).toBe('application/problem+json');
    expect(JSON.parse(reused.body.toString('utf8'))).toMatchObject({ type: 'urn:retrysafe:problem:key-reused', status: 422 });
    expect(orders.runs.get('sku-2')).toBe(1);
  });

  it('answers 400 for a malformed or missing key and for an invalid body', async () => {
    for (const key of ['has space', 'x'.repeat(256), undefined]) {
      const reply = await served.send({ key, body: order('sku-3') });
      expect(reply.status).toBe(400);
      expect(JSON.parse(reply.body.toString('utf8'))).toMatchObject({ type: 'urn:retrysafe:problem:invalid-idempotency-key' });
    }
    const invalid = await served.send({ key: 'order-3', body: JSON.stringify({ sku: '', quantity: -1 }) });
    expect(invalid.status).toBe(400);
    expect(invalid.headers.get('content-type')).toBe('application/problem+json');
    const notJson = await served.send({ key: 'order-3', body: '{"sku": ' });
    expect(notJson.status).toBe(400);
    expect(notJson.headers.get('content-type')).toBe('application/problem+json');
    expect(orders.runs.get('sku-3')).toBeUndefined();
  });

  it('answers 413 over the body cap', async () => {
    const reply = await served.send({ key: 'order-4', body: order(`big-${'x'.repeat(MAX_BODY)}`) });
    expect(reply.status).toBe(413);
    expect(reply.headers.get('content-type')).toBe('application/problem+json');
  });

  it('answers 401 without a principal, before any lookup', async () => {
    const reply = await served.send({ key: 'order-1', body: order('sku-1', 2), principal: '' });
    expect(reply.status).toBe(401);
    expect(reply.headers.get('content-type')).toBe('application/problem+json');
  });

  it('does not keep a 5xx as final: the retry runs the work again', async () => {
    const failed = await served.send({ key: 'order-5', body: order('flaky-1') });
    expect(failed.status).toBe(503);
    const retried = await served.send({ key: 'order-5', body: order('flaky-1') });
    expect(retried.status).toBe(201);
    expect(retried.headers.get('idempotent-replayed')).toBeNull();
    expect(orders.runs.get('flaky-1')).toBe(2);
  });
});
