// Key lookup for operators through the dashboard's role: each scope's metadata, never the
// body; a foreign key looks exactly like an absent one; every lookup audited with its reason.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyListSchema, keyLookupSchema, listPrincipalKeys, listStaleClaims, lookUpKey } from '../../server/idempotency/key-metadata';
import { ensurePolicies } from '../../server/retention/policies';
import { defaultPolicyFields } from '../../server/demo/policies';
import { useTestDatabase } from '../helpers/database';
import { createTestStore, jsonResult, principal, testPolicy } from '../helpers/store';

const SENTINEL = 'SENTINEL-lookup-5d1e';

describe('key lookup', () => {
  const db = useTestDatabase();
  let dashboard: pg.Pool;
  const owner = principal();

  beforeAll(async () => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 2 });
    await ensurePolicies(db.pool, defaultPolicyFields, 'test');
    const { store } = createTestStore(db.pool);
    for (const endpoint of ['POST /api/v1/payments', 'POST /api/v1/refunds']) {
      await store.execute({
        principalId: owner,
        key: 'order-1',
        endpoint,
        method: 'POST',
        body: { description: SENTINEL },
        policy: testPolicy,
        mode: 'claim-first',
        work: () => Promise.resolve(jsonResult(201, { description: SENTINEL })),
      });
    }
  });
  afterAll(async () => {
    await dashboard.end();
  });

  it('shows each scope\'s metadata and nothing of the response', async () => {
    const records = await lookUpKey(dashboard, { principalId: owner, key: 'order-1', reason: 'customer reports a double charge' }, 'ops@example.com');
    expect(records.map((record) => record.scope)).toEqual(['POST /api/v1/payments', 'POST /api/v1/refunds']);
    expect(records[0]).toMatchObject({ state: 'completed', statusCode: 201, contentType: 'application/json', storedAs: 'body', attempts: 1, takeovers: 0 });
    expect(records[0]?.fingerprintPrefix).toMatch(/^[0-9a-f]{8}$/);
    expect(records[0]?.secondsLeft).toBeGreaterThan(7_000);
    expect(JSON.stringify(records)).not.toContain(SENTINEL);
  });

  it('answers a foreign key exactly as an absent one, and audits every lookup', async () => {
    const foreign = await lookUpKey(dashboard, { principalId: principal(), key: 'order-1', reason: 'checking another tenant' }, 'ops@example.com');
    const absent = await lookUpKey(dashboard, { principalId: owner, key: 'never-used', reason: 'checking a typo' }, 'ops@example.com');
    expect(foreign).toEqual([]);
    expect(absent).toEqual(foreign);
    const { rows } = await db.pool.query<{ reason: string; target: { key: string } }>("SELECT reason, target FROM audit_log WHERE action = 'key.lookup' ORDER BY id");
    expect(rows.map((row) => row.reason)).toEqual(['customer reports a double charge', 'checking another tenant', 'checking a typo']);
    expect(JSON.stringify(rows)).not.toContain(SENTINEL);
  });

  it('refuses a lookup without a reason or with a malformed key', () => {
    expect(keyLookupSchema.safeParse({ principalId: owner, key: 'order-1', reason: '' }).success).toBe(false);
    expect(keyLookupSchema.safeParse({ principalId: owner, key: 'has space', reason: 'why not' }).success).toBe(false);
    expect(keyLookupSchema.safeParse({ principalId: 'not-a-uuid', key: 'k', reason: 'why not' }).success).toBe(false);
  });

  it('lists stale claims oldest lease first', async () => {
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
       SELECT $1, 'POST /api/v1/refunds', 'crashed-' || i, 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(),
              now() - i * interval '1 minute', now() + interval '1 day' FROM generate_series(1, 3) AS i`,
      [owner],
    );
    const claims = await listStaleClaims(dashboard, 10);
    expect(claims.map((claim) => claim.key)).toEqual(['crashed-3', 'crashed-2', 'crashed-1']);
    expect(claims[0]?.pastLeaseSeconds).toBeGreaterThan(170);
  });

  it('lists a principal\'s live keys a page at a time in key order, filtered, audited', async () => {
    const tenant = principal();
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, scope, key, state, fingerprint, correlation_id, lease_expires_at, response_status, completed_at, response_ref, created_at, expires_at)
       SELECT $1, 'POST /api/v1/payments', 'k-' || lpad(i::text, 3, '0'), CASE WHEN i % 10 = 0 THEN 'in_progress' ELSE 'completed' END,
              decode(repeat('ab', 32), 'hex'), gen_random_uuid(),
              CASE WHEN i % 10 = 0 THEN now() + interval '1 minute' END, CASE WHEN i % 10 = 0 THEN NULL ELSE 201 END,
              CASE WHEN i % 10 = 0 THEN NULL ELSE now() END, CASE WHEN i % 10 = 0 THEN NULL ELSE 'pay_' || i END,
              now() - interval '2 days', CASE WHEN i = 7 THEN now() - interval '1 second' ELSE now() + interval '1 day' END
       FROM generate_series(1, 45) AS i`,
      [tenant],
    );
    const first = await listPrincipalKeys(dashboard, keyListSchema.parse({ principalId: tenant, reason: 'browsing for ticket 9', limit: 20 }), 'ops@example.com');
    expect(first.keys.map((key) => key.key).slice(0, 7)).toEqual(['k-001', 'k-002', 'k-003', 'k-004', 'k-005', 'k-006', 'k-008']);
    expect(first.next).toEqual({ scope: 'POST /api/v1/payments', key: 'k-021' });
    const second = await listPrincipalKeys(dashboard, keyListSchema.parse({ principalId: tenant, reason: 'browsing for ticket 9', limit: 20, after: first.next }), 'ops@example.com');
    const third = await listPrincipalKeys(dashboard, keyListSchema.parse({ principalId: tenant, reason: 'browsing for ticket 9', limit: 20, after: second.next }), 'ops@example.com');
    expect([...first.keys, ...second.keys, ...third.keys]).toHaveLength(44);
    expect(third.next).toBeNull();
    const running = await listPrincipalKeys(dashboard, keyListSchema.parse({ principalId: tenant, reason: 'what is still running', state: 'in_progress' }), 'ops@example.com');
    expect(running.keys.map((key) => key.key)).toEqual(['k-010', 'k-020', 'k-030', 'k-040']);
    expect((await listPrincipalKeys(dashboard, keyListSchema.parse({ principalId: principal(), reason: 'another tenant' }), 'ops@example.com')).keys).toEqual([]);
    expect((await listPrincipalKeys(dashboard, keyListSchema.parse({ principalId: tenant, reason: 'refunds only', scope: 'POST /api/v1/refunds' }), 'ops@example.com')).keys).toEqual([]);
    const { rows } = await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM audit_log WHERE action = 'key.list' AND reason IS NOT NULL");
    expect(rows[0]?.n).toBe(6);
    expect(keyListSchema.safeParse({ principalId: tenant, reason: '' }).success).toBe(false);
  });
});
