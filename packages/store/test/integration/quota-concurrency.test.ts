// The live-key quota under concurrency, over real HTTP (the Express adapter on a socket) on a
// real database: a principal's requests in flight cannot all pass one check. On one instance
// the quota is exact (a request takes its slot when admitted, before the claim's round trip,
// and gives it back when no new key was kept); across instances the bound is N x quota,
// measured here with two instances that have not flushed (the worst case docs/compliance.md states).
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import express from 'express';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { jsonResult, LiveKeyQuota, type ExecutionMode, type IdempotencyStore } from '@retrysafe/store';
import { idempotent, problemErrors } from '@retrysafe/store/express';
import { useTestDatabase } from '../helpers/database';
import { createTestStore, newResponseKey, TEST_SERVICE, testPolicy } from '../helpers/store';

const QUOTA = 30;
const BURST = 100;
const policy = { ...testPolicy, liveKeyQuota: QUOTA };
const orderInput = z.object({ sku: z.string().min(1).max(64) });

interface Reply {
  status: number;
  retryAfter: string | null;
  contentType: string | null;
  replayed: boolean;
}

interface Instance {
  send: (principal: string, key: string, sku?: string) => Promise<Reply>;
  quota: LiveKeyQuota;
  close: () => Promise<void>;
}

/** "fail-*" SKUs answer 503 (not final: nothing of a transactional attempt survives). */
async function serve(store: IdempotencyStore, quota: LiveKeyQuota, mode: ExecutionMode): Promise<Instance> {
  const app = express();
  app.post(
    '/orders',
    express.json(),
    idempotent(store, {
      endpoint: 'POST /orders',
      method: 'POST',
      mode,
      policy,
      maxBodyBytes: 1_024,
      authenticate: (req: express.Request) => {
        const principalId = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
        return principalId ? { principalId } : null;
      },
      input: orderInput,
      work: (input) => Promise.resolve(input.sku.startsWith('fail-') ? jsonResult(503, { error: 'unavailable' }) : jsonResult(201, { id: randomUUID(), sku: input.sku })),
    }),
  );
  app.use(problemErrors());
  const server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    quota,
    send: async (principal, key, sku = key) => {
      const response = await fetch(`http://127.0.0.1:${port}/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${principal}`, 'idempotency-key': key },
        body: JSON.stringify({ sku }),
      });
      await response.arrayBuffer();
      return {
        status: response.status,
        retryAfter: response.headers.get('retry-after'),
        contentType: response.headers.get('content-type'),
        replayed: response.headers.get('idempotent-replayed') === 'true',
      };
    },
    close: async () => {
      await new Promise((done) => server.close(() => done(undefined)));
      await quota.stop();
    },
  };
}

const statuses = (replies: Reply[]) => replies.reduce<Record<number, number>>((counts, reply) => ({ ...counts, [reply.status]: (counts[reply.status] ?? 0) + 1 }), {});
const keysOf = (prefix: string, count: number) => Array.from({ length: count }, (_, i) => `${prefix}-${i}`);

describe.each(['claim-first', 'transactional'] as const)('live-key quota under concurrency, %s', (mode) => {
  const db = useTestDatabase();
  const open: Instance[] = [];
  afterAll(async () => {
    await Promise.all(open.map((instance) => instance.close()));
  });

  /** The service's response key: every instance seals and opens with it. */
  const responseKey = newResponseKey();

  /** An instance of the service: its own store and its own quota counter (as another process would have). */
  async function instance(secret: Buffer): Promise<Instance> {
    // A flush interval longer than the test: no instance sees another's keys unless told to flush.
    const quota = new LiveKeyQuota(db.pool, { service: TEST_SERVICE, flushIntervalMs: 600_000 });
    const served = await serve(createTestStore(db.pool, { quota, secret, keys: [responseKey] }).store, quota, mode);
    open.push(served);
    return served;
  }

  const liveKeys = async (principal: string) => Number((await db.pool.query<{ n: string }>('SELECT count(*) AS n FROM idempotency_keys WHERE principal_id = $1', [principal])).rows[0]?.n);

  it(`lets exactly ${QUOTA} of ${BURST} concurrent new keys from a fresh principal through on one instance, 429 with Retry-After for the rest, and existing keys still replay`, async () => {
    const server = await instance(Buffer.alloc(32, 1));
    const principal = randomUUID();
    const keys = keysOf('burst', BURST);
    const replies = await Promise.all(keys.map((key) => server.send(principal, key)));
    expect(statuses(replies)).toEqual({ 201: QUOTA, 429: BURST - QUOTA });
    for (const refused of replies.filter((reply) => reply.status === 429)) {
      expect(refused.contentType).toBe('application/problem+json');
      expect(Number(refused.retryAfter)).toBeGreaterThanOrEqual(1);
    }
    expect(await liveKeys(principal)).toBe(QUOTA);

    const created = keys.filter((_, i) => replies[i]?.status === 201);
    const replays = await Promise.all(created.map((key) => server.send(principal, key)));
    expect(replays.every((reply) => reply.status === 201 && reply.replayed)).toBe(true);
    // Still full: one more new key is refused, on the loaded (synchronous) path too.
    expect((await server.send(principal, 'one-more')).status).toBe(429);
  });

  it('counts a principal already loaded exactly too, and gives back the slot of a replay', async () => {
    const server = await instance(Buffer.alloc(32, 2));
    const principal = randomUUID();
    const first = keysOf('first', 10);
    for (const key of first) expect((await server.send(principal, key)).status).toBe(201);
    // Replays of existing keys take a slot while in flight and give it back.
    const replays = await Promise.all([...first, ...first, ...first].map((key) => server.send(principal, key)));
    expect(replays.every((reply) => reply.status === 201 && reply.replayed)).toBe(true);
    const replies = await Promise.all(keysOf('loaded', BURST).map((key) => server.send(principal, key)));
    expect(statuses(replies)).toEqual({ 201: QUOTA - first.length, 429: BURST - QUOTA + first.length });
    expect(await liveKeys(principal)).toBe(QUOTA);
  });

  it(`counts a 5xx as ${mode === 'transactional' ? 'no key (rolled back): its slot is given back' : 'a live key (its failed row stays until it expires, and its retry is no new key)'}`, async () => {
    const server = await instance(Buffer.alloc(32, 3));
    const principal = randomUUID();
    const failed = await Promise.all(keysOf('fail', 10).map((key) => server.send(principal, key)));
    expect(statuses(failed)).toEqual({ 503: 10 });
    const kept = mode === 'transactional' ? 0 : 10;
    expect(await liveKeys(principal)).toBe(kept);
    const replies = await Promise.all(keysOf('after', BURST).map((key) => server.send(principal, key)));
    expect(statuses(replies)).toEqual({ 201: QUOTA - kept, 429: BURST - QUOTA + kept });
    expect(await liveKeys(principal)).toBe(QUOTA);
  });

  it(`bounds two instances by 2 x ${QUOTA} keys (each exact, neither seeing the other before a flush), then by the quota once they have flushed`, async () => {
    const secret = Buffer.alloc(32, 4);
    const [a, b] = [await instance(secret), await instance(secret)];
    const principal = randomUUID();
    const keys = keysOf('two', BURST);
    const replies = await Promise.all(keys.map((key, i) => (i % 2 === 0 ? a : b).send(principal, key)));
    const createdOn = (server: number) => replies.filter((reply, i) => i % 2 === server && reply.status === 201).length;
    // The measured worst case: each instance lets its own quota through, no more.
    expect([createdOn(0), createdOn(1)]).toEqual([QUOTA, QUOTA]);
    expect(await liveKeys(principal)).toBe(2 * QUOTA);
    // Once both have flushed and read the totals back, neither creates another key.
    await Promise.all([a.quota.flush(), b.quota.flush()]);
    await Promise.all([a.quota.flush(), b.quota.flush()]);
    expect((await a.send(principal, 'after-flush-a')).status).toBe(429);
    expect((await b.send(principal, 'after-flush-b')).status).toBe(429);
    // And the keys either made replay on either instance (one service, one fingerprint secret).
    const created = keys.filter((_, i) => replies[i]?.status === 201);
    const replays = await Promise.all(created.map((key, i) => (i % 2 === 0 ? b : a).send(principal, key)));
    expect(replays.every((reply) => reply.status === 201 && reply.replayed)).toBe(true);
  });
});
