// What the store keeps: scoped keys, fingerprints not bodies, sealed responses bound to
// their row, references above the cap, and keys readable across a key rotation.
import { describe, expect, it } from 'vitest';
import { FingerprintMismatchError, InvalidKeyIdentityError, KeyQuotaExceededError, StoredResponseUnreadableError } from '@retrysafe/store';
import type { IdempotentCall } from '@retrysafe/store';
import { layouts, useTestDatabase } from '../helpers/database';
import { createTestStore, jsonResult, LiveKeyQuota, newResponseKey, principal, TEST_SERVICE, testPolicy } from '../helpers/store';

describe.each(layouts)('store data (%s layout)', (layout) => {
  const db = useTestDatabase(layout);

  const call = (principalId: string, key: string, extra: Partial<IdempotentCall> = {}): IdempotentCall => ({
    principalId,
    key,
    endpoint: 'POST /payments',
    method: 'POST',
    body: { amount: 1 },
    policy: testPolicy,
    mode: 'claim-first',
    work: () => Promise.resolve(jsonResult(201, { principalId, key })),
    ...extra,
  });

  it('keeps principals apart: the same key string is two independent keys', async () => {
    const { store } = createTestStore(db.pool, { layout });
    const [a, b] = [principal(), principal()];
    const first = await store.execute(call(a, 'retry-1'));
    const second = await store.execute(call(b, 'retry-1'));
    expect(second.replayed).toBe(false);
    expect(JSON.parse(second.body.toString())).toEqual({ principalId: b, key: 'retry-1' });
    expect((await store.execute(call(a, 'retry-1'))).body.equals(first.body)).toBe(true);
  });

  it.each([
    ['a principal that is not a UUID', { principalId: 'tenant-7' }, 'principalId'],
    ['a key over 255 bytes', { key: 'é'.repeat(128) }, 'key'],
    ['an empty key', { key: '' }, 'key'],
    ['a key with a NUL', { key: 'a\u0000b' }, 'key'],
    ['a scope over 200 bytes', { endpoint: `POST /${'x'.repeat(200)}` }, 'scope'],
  ] as const)('refuses %s with a typed error before any statement, and runs no work', async (_name, change, field) => {
    const { store, events } = createTestStore(db.pool, { layout });
    let ran = false;
    const attempt = store.execute({ ...call(principal(), 'k'), ...change, work: () => ((ran = true), Promise.resolve(jsonResult(201, {}))) });
    await expect(attempt).rejects.toBeInstanceOf(InvalidKeyIdentityError);
    await expect(attempt).rejects.toMatchObject({ code: 'INVALID_KEY_IDENTITY', field });
    expect(ran).toBe(false);
    // Not an `error` outcome: the caller's input was at fault, not the store.
    expect(events).toEqual([]);
  });

  it('scopes by endpoint by default, and by principal alone under an intent policy', async () => {
    const { store } = createTestStore(db.pool, { layout });
    const p = principal();
    await store.execute(call(p, 'shared', { endpoint: 'POST /payments' }));
    const other = await store.execute(call(p, 'shared', { endpoint: 'POST /refunds' }));
    expect(other.replayed).toBe(false);

    const intent = { ...testPolicy, scopeMode: 'intent' as const };
    await store.execute(call(p, 'flow-1', { endpoint: 'POST /payments', policy: intent }));
    // One intent, two endpoints: the second call is a different request under the same key.
    await expect(store.execute(call(p, 'flow-1', { endpoint: 'POST /refunds', policy: intent }))).rejects.toBeInstanceOf(
      FingerprintMismatchError,
    );
    const replay = await store.execute(call(p, 'flow-1', { endpoint: 'POST /payments', policy: intent }));
    expect(replay.replayed).toBe(true);
    const { rows } = await db.pool.query<{ scope: string }>("SELECT scope FROM idempotency_keys WHERE principal_id = $1 AND key = 'flow-1'", [p]);
    expect(rows).toEqual([{ scope: 'intent' }]);
  });

  it('treats reordered keys and whitespace as the same request', async () => {
    const { store } = createTestStore(db.pool, { layout });
    const p = principal();
    await store.execute(call(p, 'k', { body: JSON.parse('{"amount": 5, "currency": "EUR", "meta": {"b": 1, "a": [1, 2]}}') }));
    const replay = await store.execute(call(p, 'k', { body: JSON.parse('{"meta":{"a":[1,2],"b":1},"currency":"EUR","amount":5}') }));
    expect(replay.replayed).toBe(true);
    await expect(store.execute(call(p, 'k', { body: { amount: 5, currency: 'EUR', meta: { a: [2, 1], b: 1 } } }))).rejects.toBeInstanceOf(
      FingerprintMismatchError,
    );
  });

  it('never stores the request body or a plaintext response', async () => {
    const { store } = createTestStore(db.pool, { layout });
    const p = principal();
    const sentinel = 'SENTINEL-4c1f-request-and-response';
    await store.execute(
      call(p, 'k', { body: { note: sentinel }, work: () => Promise.resolve(jsonResult(201, { echoed: sentinel })) }),
    );
    const { rows } = await db.pool.query<{ row: string; body_has: boolean }>(
      `SELECT k::text AS row, position(convert_to($2, 'UTF8') IN coalesce(k.response_body, ''::bytea)) > 0 AS body_has
       FROM idempotency_keys k WHERE principal_id = $1`,
      [p, sentinel],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]?.row).not.toContain(sentinel);
    expect(rows[0]?.row).not.toContain(Buffer.from(sentinel).toString('hex'));
    expect(rows[0]?.body_has).toBe(false);
    const replay = await store.execute(call(p, 'k', { body: { note: sentinel } }));
    expect(JSON.parse(replay.body.toString())).toEqual({ echoed: sentinel });
  });

  // The demo's (legacy) service seals as before services existed; any other names itself in the
  // associated data. Both bind the body to its row.
  it.each(['demo', 'orders'])('binds a sealed response to its row: copied into another principal`s row it does not open (service %s)', async (service) => {
    const { store } = createTestStore(db.pool, { layout, service });
    const [victim, attacker] = [principal(), principal()];
    await store.execute(call(victim, 'k', { work: () => Promise.resolve(jsonResult(201, { secret: 'victim' })) }));
    await store.execute(call(attacker, 'k', { work: () => Promise.resolve(jsonResult(201, { mine: true })) }));
    await db.pool.query(
      `UPDATE idempotency_keys SET response_body = (SELECT response_body FROM idempotency_keys WHERE principal_id = $1)
       WHERE principal_id = $2`,
      [victim, attacker],
    );
    await expect(store.execute(call(attacker, 'k'))).rejects.toBeInstanceOf(StoredResponseUnreadableError);
    // The victim's own row still opens.
    expect(JSON.parse((await store.execute(call(victim, 'k'))).body.toString())).toEqual({ secret: 'victim' });
  });

  it('replays responses sealed under an older key after rotation, and seals new ones under the first key', async () => {
    const old = newResponseKey('old');
    const fresh = newResponseKey('new');
    const secret = Buffer.alloc(32, 7);
    const before = createTestStore(db.pool, { layout, keys: [old], secret });
    const p = principal();
    const original = await before.store.execute(call(p, 'k'));
    const after = createTestStore(db.pool, { layout, keys: [fresh, old], secret });
    expect((await after.store.execute(call(p, 'k'))).body.equals(original.body)).toBe(true);
    await after.store.execute(call(p, 'k2'));
    const { rows } = await db.pool.query<{ key: string; response_key_id: string }>(
      'SELECT key, response_key_id FROM idempotency_keys WHERE principal_id = $1 ORDER BY key',
      [p],
    );
    expect(rows).toEqual([
      { key: 'k', response_key_id: 'old' },
      { key: 'k2', response_key_id: 'new' },
    ]);
  });

  it('stores a reference instead of a body over the cap, and re-derives the same bytes', async () => {
    const { store } = createTestStore(db.pool, { layout });
    const p = principal();
    const large = { items: 'x'.repeat(testPolicy.maxResponseBytes * 2) };
    const derived: string[] = [];
    const big = call(p, 'k', {
      work: () => Promise.resolve(jsonResult(201, large, 'export-42')),
      rederive: (reference) => {
        derived.push(reference);
        return Promise.resolve(Buffer.from(JSON.stringify(large)));
      },
    });
    const first = await store.execute(big);
    const { rows } = await db.pool.query('SELECT response_body, response_ref, response_size FROM idempotency_keys WHERE principal_id = $1', [p]);
    expect(rows).toEqual([{ response_body: null, response_ref: 'export-42', response_size: first.body.length }]);
    const replay = await store.execute(big);
    expect(derived).toEqual(['export-42']);
    expect(replay.body.equals(first.body)).toBe(true);
    expect(replay.replayed).toBe(true);
  });

  it('enforces the live-key quota across instances, and still replays keys that exist', async () => {
    const quotaA = new LiveKeyQuota(db.pool, { service: TEST_SERVICE, flushIntervalMs: 60_000 });
    const quotaB = new LiveKeyQuota(db.pool, { service: TEST_SERVICE, flushIntervalMs: 60_000 });
    const a = createTestStore(db.pool, { layout, quota: quotaA, secret: Buffer.alloc(32, 1) });
    const storeB = createTestStore(db.pool, { layout, quota: quotaB, secret: Buffer.alloc(32, 1) }).store;
    const p = principal();
    const policy = { ...testPolicy, liveKeyQuota: 3 };
    await a.store.execute(call(p, 'k1', { policy }));
    await a.store.execute(call(p, 'k2', { policy }));
    await storeB.execute(call(p, 'k3', { policy }));
    await Promise.all([quotaA.flush(), quotaB.flush()]);
    await quotaA.flush(); // re-read after B's flush
    const refused = await a.store.execute(call(p, 'k4', { policy })).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(KeyQuotaExceededError);
    expect((refused as KeyQuotaExceededError).retryAfterSeconds).toBeGreaterThan(0);
    expect(a.events.at(-1)?.outcome).toBe('rejected');
    expect((await a.store.execute(call(p, 'k1', { policy }))).replayed).toBe(true);
    const { rowCount } = await db.pool.query("SELECT 1 FROM idempotency_keys WHERE principal_id = $1 AND key = 'k4'", [p]);
    expect(rowCount).toBe(0);
    // Another principal is unaffected.
    expect((await a.store.execute(call(principal(), 'k4', { policy }))).replayed).toBe(false);
    await Promise.all([quotaA.stop(), quotaB.stop()]);
  });

  it('decides the quota without waiting only once the principal’s count is loaded, as check() does', async () => {
    const quota = new LiveKeyQuota(db.pool, { service: TEST_SERVICE, flushIntervalMs: 60_000 });
    const { store } = createTestStore(db.pool, { layout, quota });
    const p = principal();
    const policy = { ...testPolicy, liveKeyQuota: 2 };
    expect(quota.checkLoaded(p, 'POST /payments', 2, policy.retentionMs)).toBeUndefined();
    await store.execute(call(p, 'k1', { policy }));
    expect(quota.checkLoaded(p, 'POST /payments', 2, policy.retentionMs)).toEqual({ allowed: true });
    await store.execute(call(p, 'k2', { policy }));
    const loaded = quota.checkLoaded(p, 'POST /payments', 2, policy.retentionMs);
    expect(loaded).toEqual(await quota.check(p, 'POST /payments', 2, policy.retentionMs));
    expect(loaded?.allowed).toBe(false);
    await expect(store.execute(call(p, 'k3', { policy }))).rejects.toBeInstanceOf(KeyQuotaExceededError);
    await quota.stop();
  });
});
