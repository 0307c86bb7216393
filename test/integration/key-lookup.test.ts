// Key lookup for operators through the dashboard's role: each service's and scope's metadata,
// never the body; a foreign key looks exactly like an absent one; every lookup audited with its reason.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEY_LIST_SCAN_ROWS } from '@retrysafe/store/postgres';
import { keyListSchema, keyLookupSchema, listPrincipalKeys, listStaleClaims, lookUpKey, type KeyAccess } from '../../server/idempotency/key-metadata';
import { postgresKeyAccess } from '../helpers/key-access';
import { ensurePolicies } from '../../server/retention/policies';
import { DEMO_SERVICE, defaultPolicyFields, PAYMENTS_ENDPOINT } from '../../server/demo/policies';
import { useTestDatabase } from '../helpers/database';
import { createTestStore, jsonResult, principal, testPolicy } from '../../packages/store/test/helpers/store';

const SENTINEL = 'SENTINEL-lookup-5d1e';

describe('key lookup', () => {
  const db = useTestDatabase();
  let dashboard: pg.Pool;
  let keys: KeyAccess;
  const owner = principal();

  beforeAll(async () => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 2 });
    keys = postgresKeyAccess(dashboard);
    await ensurePolicies(db.pool, DEMO_SERVICE, defaultPolicyFields, 'test');
    // Another service with the same endpoint string, used by the same principal with the same key.
    const payments = defaultPolicyFields[PAYMENTS_ENDPOINT];
    if (!payments) throw new Error('no payments policy');
    await ensurePolicies(db.pool, 'orders', { [PAYMENTS_ENDPOINT]: payments }, 'test');
    const { store } = createTestStore(db.pool);
    const orders = createTestStore(db.pool, { service: 'orders' }).store;
    for (const [target, endpoint] of [
      [store, 'POST /api/v1/payments'],
      [store, 'POST /api/v1/refunds'],
      [orders, 'POST /api/v1/payments'],
    ] as const) {
      await target.execute({
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
    const records = await lookUpKey(keys, { principalId: owner, key: 'order-1', reason: 'customer reports a double charge' }, 'ops@example.com');
    expect(records.map((record) => [record.service, record.scope])).toEqual([
      ['demo', 'POST /api/v1/payments'],
      ['demo', 'POST /api/v1/refunds'],
      ['orders', 'POST /api/v1/payments'],
    ]);
    expect(records[0]).toMatchObject({ service: 'demo', state: 'completed', statusCode: 201, contentType: 'application/json', storedAs: 'body', attempts: 1, takeovers: 0 });
    expect(records[0]?.fingerprintPrefix).toMatch(/^[0-9a-f]{8}$/);
    expect(records[0]?.secondsLeft).toBeGreaterThan(7_000);
    expect(JSON.stringify(records)).not.toContain(SENTINEL);
    // One service's records only, when it is named.
    const ofOrders = await lookUpKey(keys, { principalId: owner, service: 'orders', key: 'order-1', reason: 'the orders team asks' }, 'ops@example.com');
    expect(ofOrders.map((record) => [record.service, record.scope])).toEqual([['orders', 'POST /api/v1/payments']]);
    expect(ofOrders[0]?.correlationId).not.toBe(records[0]?.correlationId);
    expect(await lookUpKey(keys, { principalId: owner, service: 'billing', key: 'order-1', reason: 'a service with no keys' }, 'ops@example.com')).toEqual([]);
  });

  it('answers a foreign key exactly as an absent one, and audits every lookup', async () => {
    const foreign = await lookUpKey(keys, { principalId: principal(), key: 'order-1', reason: 'checking another tenant' }, 'ops@example.com');
    const absent = await lookUpKey(keys, { principalId: owner, key: 'never-used', reason: 'checking a typo' }, 'ops@example.com');
    expect(foreign).toEqual([]);
    expect(absent).toEqual(foreign);
    const { rows } = await db.pool.query<{ reason: string; target: { key: string } }>("SELECT reason, target FROM audit_log WHERE action = 'key.lookup' ORDER BY id");
    expect(rows.map((row) => row.reason)).toEqual(['customer reports a double charge', 'the orders team asks', 'a service with no keys', 'checking another tenant', 'checking a typo']);
    expect(rows[1]?.target).toEqual({ principalId: owner, service: 'orders', key: 'order-1' });
    expect(JSON.stringify(rows)).not.toContain(SENTINEL);
  });

  it('refuses a lookup without a reason or with a malformed key', () => {
    expect(keyLookupSchema.safeParse({ principalId: owner, key: 'order-1', reason: '' }).success).toBe(false);
    expect(keyLookupSchema.safeParse({ principalId: owner, key: 'has space', reason: 'why not' }).success).toBe(false);
    expect(keyLookupSchema.safeParse({ principalId: 'not-a-uuid', key: 'k', reason: 'why not' }).success).toBe(false);
    expect(keyLookupSchema.safeParse({ principalId: owner, service: 'Orders Service', key: 'k', reason: 'why not' }).success).toBe(false);
    expect(keyLookupSchema.safeParse({ principalId: owner, service: 'orders', key: 'k', reason: 'why not' }).success).toBe(true);
  });

  it('lists stale claims oldest lease first', async () => {
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
       SELECT $1, 'demo', 'POST /api/v1/refunds', 'crashed-' || i, 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(),
              now() - i * interval '1 minute', now() + interval '1 day' FROM generate_series(1, 3) AS i`,
      [owner],
    );
    const claims = await listStaleClaims(keys, 10);
    expect(claims.map((claim) => claim.key)).toEqual(['crashed-3', 'crashed-2', 'crashed-1']);
    expect(claims[0]).toMatchObject({ principalId: owner, service: 'demo', scope: 'POST /api/v1/refunds', releasable: true });
    expect(claims[0]?.pastLeaseSeconds).toBeGreaterThan(170);
  });

  it('lists a principal\'s live keys newest first, a page at a time, filtered, audited', async () => {
    const tenant = principal();
    // 45 keys a microsecond apart (a Date would round them together), every fifth sharing its
    // instant with the one before in another scope, and k-07 already expired.
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, response_status, completed_at, response_ref, created_at, expires_at)
       SELECT $1, 'demo', CASE WHEN i % 5 = 0 THEN 'POST /api/v1/refunds' ELSE 'POST /api/v1/payments' END, 'k-' || lpad(i::text, 2, '0'),
              CASE WHEN i % 10 = 0 THEN 'in_progress' ELSE 'completed' END,
              decode(repeat('ab', 32), 'hex'), gen_random_uuid(),
              CASE WHEN i % 10 = 0 THEN now() + interval '1 minute' END, CASE WHEN i % 10 = 0 THEN NULL ELSE 201 END,
              CASE WHEN i % 10 = 0 THEN NULL ELSE now() END, CASE WHEN i % 10 = 0 THEN NULL ELSE 'pay_' || i END,
              timestamptz '2026-12-01 10:00:00+00' + (i - CASE WHEN i % 5 = 0 THEN 1 ELSE 0 END) * interval '1 microsecond',
              CASE WHEN i = 7 THEN now() - interval '1 second' ELSE now() + interval '1 day' END
       FROM generate_series(1, 45) AS i`,
      [tenant],
    );
    const list = (fields: Record<string, unknown>) => listPrincipalKeys(keys, keyListSchema.parse({ principalId: tenant, reason: 'browsing for ticket 9', limit: 20, ...fields }), 'ops@example.com');
    const first = await list({});
    expect(first.keys.map((key) => key.key).slice(0, 6)).toEqual(['k-45', 'k-44', 'k-43', 'k-42', 'k-41', 'k-40']);
    // k-40 (refunds) and k-39 (payments) share an instant: scope breaks the tie, descending.
    expect(first.keys[6]?.key).toBe('k-39');
    // The cursor keeps the microsecond (k-26 was created 26 µs after 10:00).
    expect(first.next).toEqual({ createdAtMicros: String(Date.UTC(2026, 11, 1, 10) * 1000 + 26), service: 'demo', scope: 'POST /api/v1/payments', key: 'k-26' });
    expect(first.searchedBackTo).toBeNull();
    const second = await list({ after: first.next });
    // A full page, though the expired k-07 was among the keys it read.
    expect(second.keys).toHaveLength(20);
    expect(second.searchedBackTo).toBeNull();
    const third = await list({ after: second.next });
    const all = [...first.keys, ...second.keys, ...third.keys].map((key) => key.key);
    const expected = Array.from({ length: 45 }, (_, index) => 45 - index)
      .filter((i) => i !== 7)
      .map((i) => `k-${String(i).padStart(2, '0')}`)
      .sort((a, b) => {
        const at = (key: string) => Number(key.slice(2)) - (Number(key.slice(2)) % 5 === 0 ? 1 : 0);
        const scopeOf = (key: string) => (Number(key.slice(2)) % 5 === 0 ? 'r' : 'p');
        return at(b) - at(a) || (scopeOf(a) === scopeOf(b) ? 0 : scopeOf(a) === 'r' ? -1 : 1);
      });
    expect(all).toEqual(expected);
    expect(third.next).toBeNull();
    const running = await list({ state: 'in_progress' });
    expect(running.keys.map((key) => key.key)).toEqual(['k-40', 'k-30', 'k-20', 'k-10']);
    expect(running.next).toBeNull();
    expect((await listPrincipalKeys(keys, keyListSchema.parse({ principalId: principal(), reason: 'another tenant' }), 'ops@example.com')).keys).toEqual([]);
    expect((await list({ scope: 'POST /api/v1/refunds', state: 'completed' })).keys.map((key) => key.key)).toEqual(['k-45', 'k-35', 'k-25', 'k-15', 'k-05']);
    const { rows } = await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM audit_log WHERE action = 'key.list' AND reason IS NOT NULL");
    expect(rows[0]?.n).toBe(6);
    expect(keyListSchema.safeParse({ principalId: tenant, reason: '' }).success).toBe(false);
    expect(keyListSchema.safeParse({ principalId: tenant, reason: 'why not', after: { createdAtMicros: '1.5', service: 'demo', scope: 's', key: 'k' } }).success).toBe(false);
    expect(keyListSchema.safeParse({ principalId: tenant, reason: 'why not', after: { createdAtMicros: '15', service: 'demo', scope: 's', key: 'k' } }).success).toBe(true);
    // A cursor from before services (no service) is refused, not read as another position.
    expect(keyListSchema.safeParse({ principalId: tenant, reason: 'why not', after: { createdAtMicros: '15', scope: 's', key: 'k' } }).success).toBe(false);
  });

  it('lists a principal\'s keys of every service, or of one, with the service on each key and in the cursor', async () => {
    const tenant = principal();
    // Six keys a second apart, alternating services, the same endpoint and key strings in both.
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, response_status, completed_at, response_ref, created_at, expires_at)
       SELECT $1, CASE WHEN i % 2 = 0 THEN 'orders' ELSE 'demo' END, 'POST /api/v1/payments', 'k-' || (i / 2), 'completed',
              decode(repeat('ab', 32), 'hex'), gen_random_uuid(), 201, now(), 'ref', now() - interval '1 hour' + i * interval '1 second', now() + interval '1 day'
       FROM generate_series(0, 5) AS i`,
      [tenant],
    );
    const list = (fields: Record<string, unknown>) => listPrincipalKeys(keys, keyListSchema.parse({ principalId: tenant, reason: 'per service', limit: 4, ...fields }), 'ops@example.com');
    const all = await list({});
    expect(all.keys.map((key) => [key.service, key.key])).toEqual([
      ['demo', 'k-2'],
      ['orders', 'k-2'],
      ['demo', 'k-1'],
      ['orders', 'k-1'],
    ]);
    expect(all.next).toMatchObject({ service: 'orders', key: 'k-1' });
    const rest = await list({ after: all.next });
    expect(rest.keys.map((key) => [key.service, key.key])).toEqual([
      ['demo', 'k-0'],
      ['orders', 'k-0'],
    ]);
    const orders = await list({ service: 'orders' });
    expect(orders.keys.map((key) => [key.service, key.key])).toEqual([
      ['orders', 'k-2'],
      ['orders', 'k-1'],
      ['orders', 'k-0'],
    ]);
    expect(orders.next).toBeNull();
    expect((await list({ service: 'billing' })).keys).toEqual([]);
    const { rows } = await db.pool.query<{ details: { service: string | null } }>(
      "SELECT details FROM audit_log WHERE action = 'key.list' AND target->>'principalId' = $1 ORDER BY id",
      [tenant],
    );
    expect(rows.map((row) => row.details.service)).toEqual([null, null, 'orders', 'billing']);
  });

  it('bounds the keys a filtered page examines and resumes where it stopped', async () => {
    const tenant = principal();
    const rare = [10, 1_200, 2_400];
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, response_status, completed_at, response_ref, created_at, expires_at)
       SELECT $1, 'demo', 'POST /api/v1/payments', 'bulk-' || i, CASE WHEN i = ANY ($2::int[]) THEN 'failed' ELSE 'completed' END,
              decode(repeat('ab', 32), 'hex'), gen_random_uuid(), 201, now(), 'pay_' || i,
              now() - interval '1 hour' + i * interval '1 millisecond', now() + interval '1 day'
       FROM generate_series(1, ${KEY_LIST_SCAN_ROWS} + 500) AS i`,
      [tenant, rare],
    );
    const list = (fields: Record<string, unknown>) => listPrincipalKeys(keys, keyListSchema.parse({ principalId: tenant, reason: 'which ones failed', state: 'failed', ...fields }), 'ops@example.com');
    const first = await list({});
    // The newest 2,000 keys hold two of the three: the page is short and says how far back it looked.
    expect(first.keys.map((key) => key.key)).toEqual(['bulk-2400', 'bulk-1200']);
    expect(first.next?.key).toBe('bulk-501');
    expect(first.searchedBackTo).not.toBeNull();
    const second = await list({ after: first.next });
    expect(second.keys.map((key) => key.key)).toEqual(['bulk-10']);
    expect(second.next).toBeNull();
    expect(second.searchedBackTo).toBeNull();
  });
});
