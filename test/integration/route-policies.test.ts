// A route whose policy is given in code (idempotent(store, { endpoint, policy: {...} })) is
// reviewable and findable: its endpoint's policy row is created when none exists (history and
// audit, once however many instances register it at once), the dashboard's key lookup finds its
// keys, and the retention review lists it with its window. The published row (an admin's to
// change) is never overwritten by code: where the code's values differ, the review says so, and
// the lookup still probes the scope the code stores keys under. Served by real Express, read
// through the dashboard's role.
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { randomBytes, randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import express from 'express';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createRetrysafe, jsonResult, routePolicyRegistered, type EndpointPolicy, type Retrysafe } from '@retrysafe/store';
import { idempotent } from '@retrysafe/store/express';
import type { ExpressRoute } from '@retrysafe/store/express';
import { idempotentRoute, type NextRoute } from '@retrysafe/store/next';
import { NextRequest } from 'next/server';
import { lookUpKey } from '../../server/idempotency/key-metadata';
import { changePolicy, getPolicy } from '../../server/retention/policies';
import { readRetentionReview } from '../../server/retention/review';
import { postgresKeyAccess } from '../helpers/key-access';
import { useTestDatabase } from '../helpers/database';

const CAPACITY_SETTINGS = { databaseMemoryBytes: undefined, indexOverMemoryShare: 0.8 };

const SERVICE = 'shop';
const responseKeys = `k1:${randomBytes(32).toString('base64')}`;

const policy = (windowSeconds: number, retentionSeconds: number, scopeMode: EndpointPolicy['scopeMode'] = 'endpoint'): EndpointPolicy => ({
  scopeMode,
  retryWindowMs: windowSeconds * 1000,
  retentionMs: retentionSeconds * 1000,
  leaseMs: 10_000,
  lockTimeoutMs: 2_000,
  maxResponseBytes: 4_096,
  liveKeyQuota: 1_000,
});

const itemInput = z.object({ item: z.string().min(1) });

function route(endpoint: string, own: EndpointPolicy, errors: unknown[] = []): ExpressRoute<z.infer<typeof itemInput>, { principalId: string }> {
  return {
    endpoint,
    method: 'POST',
    mode: 'claim-first',
    policy: own,
    maxBodyBytes: 1_024,
    authenticate: (req) => {
      const principalId = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
      return principalId ? { principalId } : null;
    },
    input: itemInput,
    work: (input) => Promise.resolve(jsonResult(201, { id: randomUUID(), item: input.item })),
    onError: (error) => errors.push(error),
  };
}

async function serve(path: string, handler: express.RequestHandler): Promise<{ post: (principal: string, key: string) => Promise<number>; close: () => Promise<void> }> {
  const app = express();
  app.post(path, express.json(), handler);
  const server: Server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    post: async (principal, key) => {
      const response = await fetch(`http://127.0.0.1:${port}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${principal}`, 'idempotency-key': key },
        body: JSON.stringify({ item: 'book' }),
      });
      await response.arrayBuffer();
      return response.status;
    },
    close: () => new Promise((done) => server.close(() => done())),
  };
}

describe('a route with its own policy in code', () => {
  const db = useTestDatabase();
  let dashboard: pg.Pool;
  let retrysafe: Retrysafe;

  beforeAll(async () => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 2 });
    // The service's other endpoint comes from createRetrysafe's defaults, as before.
    retrysafe = await createRetrysafe({ pool: db.storePool, service: SERVICE, fingerprintSecret: randomBytes(32), responseKeys, quota: false, policies: { 'POST /x': policy(3_600, 7_200) } });
  });
  afterAll(async () => {
    await retrysafe.stop();
    await dashboard.end();
  });

  it('is listed by the retention review with its window, and its keys are found by the key lookup', async () => {
    const errors: unknown[] = [];
    const ownRoute = route('POST /y', policy(600, 1_200), errors);
    const served = await serve('/y', idempotent(retrysafe.store, ownRoute));
    const principal = randomUUID();
    try {
      expect(await served.post(principal, 'order-y-1')).toBe(201);
    } finally {
      await served.close();
    }
    expect(await routePolicyRegistered(ownRoute)).toBe(true);
    expect(errors).toEqual([]);

    const records = await lookUpKey(postgresKeyAccess(dashboard), { principalId: principal, key: 'order-y-1', service: SERVICE, reason: 'incident: customer reports a double order' }, 'ops@example.com');
    expect(records.map((record) => [record.service, record.scope, record.state, record.statusCode])).toEqual([[SERVICE, 'POST /y', 'completed', 201]]);

    const review = await readRetentionReview(dashboard, SERVICE, CAPACITY_SETTINGS);
    expect(review.policies.map((row) => row.endpoint)).toEqual(['POST /x', 'POST /y']);
    const y = review.policies.find((row) => row.endpoint === 'POST /y');
    expect(y).toMatchObject({ retryWindowSeconds: 600, retentionSeconds: 1_200, scopeMode: 'endpoint', keepsPromise: true, codeDifferences: [] });
    expect(y?.code).toMatchObject({ retryWindowSeconds: 600, retentionSeconds: 1_200 });
    // An endpoint on createRetrysafe's defaults runs on the published policy: no code of its own.
    expect(review.policies.find((row) => row.endpoint === 'POST /x')?.code).toBeNull();
    // Created as createRetrysafe's defaults are: a history entry saying where it came from (the store writes no audit row).
    expect(review.history.filter((entry) => entry.endpoint === 'POST /y').map((entry) => [entry.version, entry.changedBy, entry.reason])).toEqual([[1, `service:${SERVICE}`, "created with the route's policy in code"]]);
    const audit = await db.pool.query("SELECT 1 FROM retrysafe_server.audit_log WHERE action = 'policy.create' AND target->>'service' = $1", [SERVICE]);
    expect(audit.rows).toEqual([]);
  });

  it('creates the row once when many instances register the same route at once', async () => {
    const routes = Array.from({ length: 8 }, (_, i) => route('POST /z', policy(600, 1_200 + i * 60)));
    for (const each of routes) idempotent(retrysafe.store, each);
    expect(await Promise.all(routes.map((each) => routePolicyRegistered(each)))).toEqual(routes.map(() => true));
    const history = await db.pool.query("SELECT version FROM endpoint_policy_history WHERE service = $1 AND endpoint = 'POST /z'", [SERVICE]);
    expect(history.rowCount).toBe(1);
  });

  it('keeps the published row an admin changed, and shows where the code differs on the review', async () => {
    const first = route('POST /w', policy(600, 1_200));
    idempotent(retrysafe.store, first);
    expect(await routePolicyRegistered(first)).toBe(true);
    const published = await getPolicy(db.pool, SERVICE, 'POST /w');
    if (!published) throw new Error('POST /w was not created');
    await changePolicy(db.pool, {
      service: SERVICE,
      endpoint: 'POST /w',
      fields: { ...published, retryWindowSeconds: 1_800, retentionSeconds: 3_600 },
      actor: 'admin@example.com',
      reason: 'the published promise is 30 minutes',
      expectedVersion: published.version,
    });
    // The next deploy still carries the old values in code: the row is left as the admin made it.
    const next = route('POST /w', policy(600, 1_200));
    idempotent(retrysafe.store, next);
    expect(await routePolicyRegistered(next)).toBe(true);
    expect(await getPolicy(db.pool, SERVICE, 'POST /w')).toMatchObject({ retryWindowSeconds: 1_800, retentionSeconds: 3_600, version: 2 });

    const review = await readRetentionReview(dashboard, SERVICE, CAPACITY_SETTINGS);
    const w = review.policies.find((row) => row.endpoint === 'POST /w');
    expect(w).toMatchObject({ retryWindowSeconds: 1_800, retentionSeconds: 3_600 });
    expect(w?.codeDifferences).toEqual([
      { field: 'retryWindowSeconds', label: 'Retry window', published: '30 min', code: '10 min' },
      { field: 'retentionSeconds', label: 'Retention', published: '1 h', code: '20 min' },
    ]);
    // The route's keys are kept 20 minutes, less than the 30-minute window published: the promise is not kept.
    expect(w?.keepsPromise).toBe(false);
  });

  it("finds the keys under the scope the code stores them in when an admin changed the published scope mode", async () => {
    const first = route('POST /v', policy(600, 1_200, 'intent'));
    const served = await serve('/v', idempotent(retrysafe.store, first));
    expect(await routePolicyRegistered(first)).toBe(true);
    const published = await getPolicy(db.pool, SERVICE, 'POST /v');
    if (!published) throw new Error('POST /v was not created');
    await changePolicy(db.pool, {
      service: SERVICE,
      endpoint: 'POST /v',
      fields: { ...published, scopeMode: 'endpoint' },
      actor: 'admin@example.com',
      reason: 'one key per endpoint from now on',
      expectedVersion: published.version,
      acknowledgeBreakingChange: true,
    });
    const principal = randomUUID();
    try {
      // The route still runs on its code's intent scope.
      expect(await served.post(principal, 'order-v-1')).toBe(201);
    } finally {
      await served.close();
    }
    const records = await lookUpKey(postgresKeyAccess(dashboard), { principalId: principal, key: 'order-v-1', reason: 'incident' }, 'ops@example.com');
    expect(records.map((record) => [record.service, record.scope])).toEqual([[SERVICE, 'intent']]);
    const review = await readRetentionReview(dashboard, SERVICE, CAPACITY_SETTINGS);
    expect(review.policies.find((row) => row.endpoint === 'POST /v')?.codeDifferences.map((difference) => [difference.field, difference.code, difference.published])).toEqual([
      ['scopeMode', 'principal only (intent)', 'principal + endpoint'],
    ]);
  });

  it("registers a Next route whose store is resolved lazily on its first request", async () => {
    const own: NextRoute<z.infer<typeof itemInput>, { principalId: string }> = {
      endpoint: 'POST /t',
      method: 'POST',
      mode: 'claim-first',
      policy: policy(900, 1_800),
      maxBodyBytes: 1_024,
      input: itemInput,
      authenticate: (request) => {
        const principalId = /^Bearer (\S+)$/.exec(request.headers.get('authorization') ?? '')?.[1];
        return principalId ? { principalId } : null;
      },
      work: (input) => Promise.resolve(jsonResult(201, { id: randomUUID(), item: input.item })),
    };
    const handler = idempotentRoute(() => retrysafe.store, own);
    expect(await routePolicyRegistered(own)).toBe(false); // nothing to register with before a request
    const principal = randomUUID();
    const response = await handler(
      new NextRequest('http://shop.test/t', {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${principal}`, 'idempotency-key': 'order-t-1' },
        body: JSON.stringify({ item: 'book' }),
      }),
    );
    expect(response.status).toBe(201);
    expect(await routePolicyRegistered(own)).toBe(true);
    const records = await lookUpKey(postgresKeyAccess(dashboard), { principalId: principal, key: 'order-t-1', reason: 'incident' }, 'ops@example.com');
    expect(records.map((record) => [record.service, record.scope])).toEqual([[SERVICE, 'POST /t']]);
    expect((await readRetentionReview(dashboard, SERVICE, CAPACITY_SETTINGS)).policies.find((row) => row.endpoint === 'POST /t')).toMatchObject({ retryWindowSeconds: 900, retentionSeconds: 1_800 });
  });

  it('reports a policy endpoint_policies cannot hold through onError, and the route still answers', async () => {
    const errors: unknown[] = [];
    const odd = route('POST /u', { ...policy(600, 1_200), retentionMs: 1_200_500 }, errors);
    const served = await serve('/u', idempotent(retrysafe.store, odd));
    try {
      expect(await routePolicyRegistered(odd)).toBe(false);
      expect(String(errors[0])).toMatch(/service "shop" endpoint "POST \/u": retentionMs must be a positive whole number of seconds/);
      expect(await served.post(randomUUID(), 'order-u-1')).toBe(201);
    } finally {
      await served.close();
    }
    expect(await getPolicy(db.pool, SERVICE, 'POST /u')).toBeNull();
  });
});
