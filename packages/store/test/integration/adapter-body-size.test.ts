// The body cap is on the bytes the request carried, decoded, whatever parser ran before the
// adapter: express.json() (which inflates gzip and deflate), Fastify's content-type parser behind
// a preParsing hook that inflates (Fastify's documented way), and Hono's c.req.json() (through
// its validator) behind a middleware that inflates. Over the real frameworks: a gzip or deflate
// body over the cap (50,016 bytes sent as about a hundred), a chunked body over it (no
// Content-Length), and bodies exactly at the cap, which are accepted.
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { Readable, type Transform } from 'node:stream';
import { createGunzip, createInflate, deflateSync, gzipSync } from 'node:zlib';
import express from 'express';
import Fastify from 'fastify';
import { Hono } from 'hono';
import { validator } from 'hono/validator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { jsonResult, type IdempotencyStore, type IdempotentRoute, type Principal } from '@retrysafe/store';
import { idempotent as expressIdempotent, problemErrors, recordBodyBytes } from '@retrysafe/store/express';
import { idempotent as fastifyIdempotent } from '@retrysafe/store/fastify';
import { idempotent as honoIdempotent } from '@retrysafe/store/hono';
import { useTestDatabase } from '../helpers/database';
import { createTestStore, testPolicy } from '../helpers/store';

const MAX_BODY = 1_024;
const input = z.object({ sku: z.string().min(1).max(64), quantity: z.number().int().positive() });

type Encoding = 'gzip' | 'deflate' | 'chunked' | 'plain';

interface Sent {
  key: string;
  text: string;
  encoding: Encoding;
}

interface Served {
  send: (sent: Sent) => Promise<{ status: number; contentType: string | null }>;
  close: () => Promise<void>;
}

function route<Native>(runs: Map<string, number>, principal: string): IdempotentRoute<z.infer<typeof input>, Principal, Native> {
  return {
    endpoint: 'POST /orders',
    method: 'POST',
    mode: 'claim-first',
    policy: testPolicy,
    maxBodyBytes: MAX_BODY,
    authenticate: () => ({ principalId: principal }),
    input,
    work: (order) => {
      runs.set(order.sku, (runs.get(order.sku) ?? 0) + 1);
      return Promise.resolve(jsonResult(201, { id: randomUUID(), sku: order.sku }));
    },
  };
}

/** A valid order of exactly `bytes` bytes of JSON text (a `note` the schema ignores pads it). */
function orderOfSize(sku: string, bytes: number): string {
  const bare = JSON.stringify({ sku, quantity: 1, note: '' });
  const text = JSON.stringify({ sku, quantity: 1, note: 'x'.repeat(bytes - bare.length) });
  expect(Buffer.byteLength(text)).toBe(bytes);
  return text;
}

/** The request's body and headers as sent: compressed with its Content-Encoding, or chunked (a stream, no Content-Length). */
function encoded(sent: Sent): { headers: Record<string, string>; body: Buffer | ReadableStream<Uint8Array> } {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'idempotency-key': sent.key };
  const bytes = Buffer.from(sent.text, 'utf8');
  switch (sent.encoding) {
    case 'gzip':
      return { headers: { ...headers, 'content-encoding': 'gzip' }, body: gzipSync(bytes) };
    case 'deflate':
      return { headers: { ...headers, 'content-encoding': 'deflate' }, body: deflateSync(bytes) };
    case 'chunked': {
      // Several chunks of at most 500 bytes.
      const chunks: Buffer[] = [];
      for (let at = 0; at < bytes.length; at += 500) chunks.push(bytes.subarray(at, at + 500));
      return { headers, body: Readable.toWeb(Readable.from(chunks)) as ReadableStream<Uint8Array> };
    }
    case 'plain':
      return { headers, body: bytes };
  }
}

async function overSocket(port: number, sent: Sent): Promise<{ status: number; contentType: string | null }> {
  const { headers, body } = encoded(sent);
  const response = await fetch(`http://127.0.0.1:${port}/orders`, { method: 'POST', headers, body, duplex: 'half' } as RequestInit);
  await response.arrayBuffer();
  return { status: response.status, contentType: response.headers.get('content-type') };
}

async function listening(server: import('node:http').Server): Promise<number> {
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}

type Setup = (store: IdempotencyStore, runs: Map<string, number>, principal: string) => Promise<Served>;

const setups: Record<string, Setup> = {
  'express.json()': async (store, runs, principal) => {
    const app = express();
    app.post('/orders', express.json(), expressIdempotent(store, route(runs, principal)));
    app.use(problemErrors());
    const server = app.listen(0, '127.0.0.1');
    const port = await listening(server);
    return { send: (sent) => overSocket(port, sent), close: () => new Promise((done) => server.close(() => done())) };
  },
  'express.json({ verify: recordBodyBytes })': async (store, runs, principal) => {
    const app = express();
    app.post('/orders', express.json({ verify: recordBodyBytes }), expressIdempotent(store, route(runs, principal)));
    app.use(problemErrors());
    const server = app.listen(0, '127.0.0.1');
    const port = await listening(server);
    return { send: (sent) => overSocket(port, sent), close: () => new Promise((done) => server.close(() => done())) };
  },
  'Fastify, inflating in preParsing': async (store, runs, principal) => {
    const app = Fastify();
    app.addHook('preParsing', (request, _reply, payload, done) => {
      const encoding = request.headers['content-encoding'];
      if (encoding !== 'gzip' && encoding !== 'deflate') {
        done(null, payload);
        return;
      }
      // As Fastify documents it: the new stream carries the encoded length read so far, which
      // Fastify matches against Content-Length; the body limit applies to what it yields.
      const inflated: Transform & { receivedEncodedLength?: number } = payload.pipe(encoding === 'gzip' ? createGunzip() : createInflate());
      inflated.receivedEncodedLength = 0;
      payload.on('data', (chunk: Buffer) => (inflated.receivedEncodedLength = (inflated.receivedEncodedLength ?? 0) + chunk.length));
      payload.on('error', (error) => inflated.destroy(error));
      done(null, inflated);
    });
    app.post('/orders', fastifyIdempotent(store, route(runs, principal)));
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as AddressInfo;
    return { send: (sent) => overSocket(port, sent), close: () => app.close() };
  },
  "Hono, c.req.json() in its validator after an inflating middleware": (store, runs, principal) => {
    const app = new Hono();
    app.post(
      '/orders',
      async (c, next) => {
        const encoding = c.req.header('content-encoding');
        if ((encoding === 'gzip' || encoding === 'deflate') && c.req.raw.body) {
          const body = c.req.raw.body.pipeThrough(new DecompressionStream(encoding));
          c.req.raw = new Request(c.req.raw, { body, duplex: 'half' } as RequestInit);
        }
        await next();
      },
      validator('json', (value: unknown) => value),
      honoIdempotent(store, route(runs, principal)),
    );
    return Promise.resolve({
      send: async (sent) => {
        const { headers, body } = encoded(sent);
        const response = await app.fetch(new Request('http://orders.test/orders', { method: 'POST', headers, body, duplex: 'half' } as RequestInit));
        await response.arrayBuffer();
        return { status: response.status, contentType: response.headers.get('content-type') };
      },
      close: () => Promise.resolve(),
    });
  },
};

describe.each(Object.keys(setups))('the body cap behind %s', (name) => {
  const db = useTestDatabase();
  const runs = new Map<string, number>();
  let served: Served;

  beforeAll(async () => {
    const setup = setups[name];
    if (!setup) throw new Error(`no setup ${name}`);
    served = await setup(createTestStore(db.pool).store, runs, randomUUID());
  });
  afterAll(() => served.close());

  it.each(['gzip', 'deflate', 'chunked'] as const)('answers 413 to a %s body over the cap, and runs nothing', async (encoding) => {
    const sku = `over-${encoding}`;
    // 50,016 bytes: as gzip or deflate about a hundred on the wire.
    const far = await served.send({ key: `far-${encoding}`, text: orderOfSize(sku, 50_016), encoding });
    expect(far.status).toBe(413);
    expect(far.contentType).toBe('application/problem+json');
    // One byte over.
    const near = await served.send({ key: `near-${encoding}`, text: orderOfSize(sku, MAX_BODY + 1), encoding });
    expect(near.status).toBe(413);
    expect(near.contentType).toBe('application/problem+json');
    // The 3,014-byte body of the report.
    const mid = await served.send({ key: `mid-${encoding}`, text: orderOfSize(sku, 3_014), encoding });
    expect(mid.status).toBe(413);
    expect(runs.get(sku)).toBeUndefined();
  });

  it.each(['gzip', 'deflate', 'chunked', 'plain'] as const)('accepts a %s body exactly at the cap, and replays it', async (encoding) => {
    const sku = `at-${encoding}`;
    const text = orderOfSize(sku, MAX_BODY);
    expect((await served.send({ key: `at-${encoding}`, text, encoding })).status).toBe(201);
    expect((await served.send({ key: `at-${encoding}`, text, encoding })).status).toBe(201);
    expect(runs.get(sku)).toBe(1);
  });
});

describe('express.json() with recordBodyBytes', () => {
  const db = useTestDatabase();
  const runs = new Map<string, number>();
  let served: Served;

  beforeAll(async () => {
    served = await (setups['express.json({ verify: recordBodyBytes })'] as Setup)(createTestStore(db.pool).store, runs, randomUUID());
  });
  afterAll(() => served.close());

  it.each(['gzip', 'chunked'] as const)('counts the whitespace a %s body carried (the decoded bytes, not the canonical form)', async (encoding) => {
    const text = `${JSON.stringify({ sku: `padded-${encoding}`, quantity: 1 })}${' '.repeat(MAX_BODY)}`;
    const reply = await served.send({ key: `padded-${encoding}`, text, encoding });
    expect(reply.status).toBe(413);
    expect(runs.get(`padded-${encoding}`)).toBeUndefined();
  });
});
