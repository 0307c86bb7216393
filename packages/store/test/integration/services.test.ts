// Services (#14 point 4): two services sharing one database, the same principal ids, endpoint
// strings and keys, never share a key: each runs its own work once and replays only its own
// response; a ciphertext moved into the other service's row does not open; quota counters,
// flow buckets and policies are kept per service; and a route without a policy is refused when
// it is created, with the service and endpoint named.
import { randomBytes, randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  createRetrysafe,
  IdempotencyStore,
  LiveKeyQuota,
  ResponseKeyRing,
  StoredResponseUnreadableError,
  type EndpointPolicy,
  type Retrysafe,
} from '@retrysafe/store';
import { idempotent } from '@retrysafe/store/fetch';
import { layouts, useTestDatabase } from '../helpers/database';
import { jsonResult, newResponseKey, testPolicy } from '../helpers/store';

const ENDPOINT = 'POST /orders';

for (const layout of layouts) {
  describe(`two services in one database (${layout} layout)`, () => {
    const db = useTestDatabase(layout);

    function storeOf(service: string, keyRing: ResponseKeyRing, secret: Buffer) {
      return new IdempotencyStore({ pool: db.storePool, service, layout, fingerprintSecret: secret, keyRing });
    }

    it('never replays the other service’s response, whatever they share', async () => {
      // The same secret and keys even: only the service tells the rows apart.
      const keyRing = new ResponseKeyRing([newResponseKey()]);
      const secret = randomBytes(32);
      const a = storeOf('orders', keyRing, secret);
      const b = storeOf('billing', keyRing, secret);
      const principalId = randomUUID();
      const runs: string[] = [];
      const call = (service: string) => ({
        principalId,
        endpoint: ENDPOINT,
        method: 'POST',
        key: 'shared-key',
        body: { sku: 'A-1', quantity: 1 },
        policy: testPolicy,
        mode: 'claim-first' as const,
        work: () => {
          runs.push(service);
          return Promise.resolve(jsonResult(201, { by: service }));
        },
      });
      for (const mode of ['claim-first', 'transactional'] as const) {
        runs.length = 0;
        const key = `shared-${mode}`;
        const first = await a.execute({ ...call('orders'), key, mode });
        const other = await b.execute({ ...call('billing'), key, mode });
        expect(first.replayed).toBe(false);
        expect(other.replayed).toBe(false);
        expect(JSON.parse(other.body.toString())).toEqual({ by: 'billing' });
        const replayA = await a.execute({ ...call('orders'), key, mode });
        const replayB = await b.execute({ ...call('billing'), key, mode });
        expect(replayA).toMatchObject({ replayed: true, correlationId: first.correlationId });
        expect(replayA.body.equals(first.body)).toBe(true);
        expect(replayB).toMatchObject({ replayed: true, correlationId: other.correlationId });
        expect(JSON.parse(replayB.body.toString())).toEqual({ by: 'billing' });
        expect(runs).toEqual(['orders', 'billing']);
      }
      const { rows } = await db.pool.query<{ service: string }>('SELECT service FROM idempotency_keys WHERE principal_id = $1 ORDER BY service, key', [principalId]);
      expect(rows.map((row) => row.service)).toEqual(['billing', 'billing', 'orders', 'orders']);
    });

    it('binds a stored response to its service: a ciphertext copied into the other service’s row does not open', async () => {
      const keyRing = new ResponseKeyRing([newResponseKey()]);
      const secret = randomBytes(32);
      const a = storeOf('orders', keyRing, secret);
      const b = storeOf('billing', keyRing, secret);
      const principalId = randomUUID();
      const call = { principalId, endpoint: ENDPOINT, method: 'POST', key: 'copied', body: { n: 1 }, policy: testPolicy, mode: 'claim-first' as const };
      await a.execute({ ...call, work: () => Promise.resolve(jsonResult(201, { secret: 'orders only' })) });
      await b.execute({ ...call, work: () => Promise.resolve(jsonResult(201, { secret: 'billing' })) });
      await db.pool.query(
        `UPDATE idempotency_keys b SET response_body = a.response_body, response_key_id = a.response_key_id
         FROM idempotency_keys a
         WHERE a.principal_id = $1 AND a.service = 'orders' AND a.key = 'copied' AND b.principal_id = $1 AND b.service = 'billing' AND b.key = 'copied'`,
        [principalId],
      );
      await expect(b.execute({ ...call, work: () => Promise.resolve(jsonResult(201, {})) })).rejects.toBeInstanceOf(StoredResponseUnreadableError);
      expect(JSON.parse((await a.execute({ ...call, work: () => Promise.resolve(jsonResult(201, {})) })).body.toString())).toEqual({ secret: 'orders only' });
    });

    it('counts quota, flow and policies per service', async () => {
      const principalId = randomUUID();
      const tight: EndpointPolicy = { ...testPolicy, liveKeyQuota: 1 };
      const keyRing = new ResponseKeyRing([newResponseKey()]);
      const secret = randomBytes(32);
      const quotaA = new LiveKeyQuota(db.storePool, { service: 'orders', flushIntervalMs: 60_000 });
      const quotaB = new LiveKeyQuota(db.storePool, { service: 'billing', flushIntervalMs: 60_000 });
      const a = new IdempotencyStore({ pool: db.storePool, service: 'orders', layout, fingerprintSecret: secret, keyRing, quota: quotaA });
      const b = new IdempotencyStore({ pool: db.storePool, service: 'billing', layout, fingerprintSecret: secret, keyRing, quota: quotaB });
      const call = { principalId, endpoint: ENDPOINT, method: 'POST', body: {}, policy: tight, mode: 'claim-first' as const, work: () => Promise.resolve(jsonResult(201, {})) };
      await a.execute({ ...call, key: 'q1' });
      await quotaA.flush();
      // The other service's one key does not use up this one's quota of one.
      await expect(b.execute({ ...call, key: 'q1' })).resolves.toMatchObject({ status: 201 });
      await quotaB.flush();
      await expect(a.execute({ ...call, key: 'q2' })).rejects.toMatchObject({ code: 'KEY_QUOTA_EXCEEDED' });
      const { rows } = await db.pool.query<{ service: string; claims: number }>(
        'SELECT service, sum(claims)::int AS claims FROM idempotency_key_usage WHERE principal_id = $1 GROUP BY service ORDER BY service',
        [principalId],
      );
      expect(rows).toEqual([
        { service: 'billing', claims: 1 },
        { service: 'orders', claims: 1 },
      ]);
    });
  });
}

describe('createRetrysafe and its policies', () => {
  const db = useTestDatabase();
  const options = (service: string) => ({
    pool: db.storePool,
    service,
    fingerprintSecret: randomBytes(32),
    responseKeys: `k1:${randomBytes(32).toString('base64')}`,
    quota: false as const,
    metricsFlushIntervalMs: 60_000,
    policyRefreshMs: 60_000,
  });

  it('creates the service’s default policies once, with their first history entry, and reads the database’s version after', async () => {
    const policy: EndpointPolicy = { ...testPolicy, retryWindowMs: 3_600_000, retentionMs: 7_200_000 };
    const first = await createRetrysafe({ ...options('shipping'), policies: { [ENDPOINT]: policy } });
    // Another instance starting with other defaults does not overwrite the policy in force.
    const second = await createRetrysafe({ ...options('shipping'), policies: { [ENDPOINT]: { ...policy, retryWindowMs: 60_000, retentionMs: 60_000 } } });
    try {
      expect(second.store.policyFor(ENDPOINT).retryWindowMs).toBe(3_600_000);
      // Its history entry is the record of the creation (the store writes no audit log: the Retrysafe server's).
      const { rows } = await db.pool.query<{ version: number; changed_by: string; reason: string; previous: unknown }>(
        "SELECT version, changed_by, reason, previous FROM endpoint_policy_history WHERE service = 'shipping'",
      );
      expect(rows).toEqual([{ version: 1, changed_by: 'service:shipping', reason: "created with the service's default policy", previous: null }]);
      expect((await db.pool.query<{ found: string | null }>("SELECT to_regclass('retrysafe.audit_log')::text AS found")).rows[0]?.found).toBeNull();
      // A change made on the dashboard (the database) reaches the service at its next refresh.
      await db.pool.query("UPDATE endpoint_policies SET retention_seconds = 10800 WHERE service = 'shipping' AND endpoint = $1", [ENDPOINT]);
      await first.policies.refresh();
      expect(first.store.policyFor(ENDPOINT).retentionMs).toBe(10_800_000);
      // Another service with the same endpoint string has no policy from this one.
      const other: Retrysafe = await createRetrysafe(options('returns'));
      try {
        expect(() => other.store.policyFor(ENDPOINT)).toThrow(/service "returns" endpoint "POST \/orders"/);
      } finally {
        await other.stop();
      }
    } finally {
      await first.stop();
      await second.stop();
    }
  });

  it('refuses, when the route is created, a route without a policy of its own or of its service', async () => {
    const retrysafe = await createRetrysafe(options('refunds-svc'));
    try {
      const route = {
        endpoint: 'POST /refunds',
        method: 'POST',
        mode: 'claim-first' as const,
        maxBodyBytes: 1024,
        authenticate: () => ({ principalId: randomUUID() }),
        input: { safeParse: (value: unknown) => ({ success: true as const, data: value }) },
        work: () => Promise.resolve(jsonResult(201, {})),
      };
      expect(() => idempotent(retrysafe.store, route)).toThrow(/No idempotency policy for service "refunds-svc" endpoint "POST \/refunds"/);
      // With its own policy the same route is accepted.
      expect(typeof idempotent(retrysafe.store, { ...route, policy: testPolicy })).toBe('function');
    } finally {
      await retrysafe.stop();
    }
  });

  it('refuses a service name the key table would refuse, before connecting', async () => {
    await expect(createRetrysafe(options('Orders Service'))).rejects.toThrow(/service must be 1 to 63 characters/);
  });
});
