// The dashboard's key lookup and a principal's key list for records kept in Redis (RedisKeyReads):
// every record of (principal, key) across the services and scopes the policies know, metadata
// only; another principal's key is as absent as one never used; the list newest first, a page at
// a time by cursor, filtered by state, skipping records Redis has expired or evicted, from the
// principal's index (no SCAN).
import { describe, expect, it } from 'vitest';
import { IdempotencyStore, ResponseKeyRing, type IdempotentCall } from '@retrysafe/store';
import { principalIndexKey, RedisKeyReads, recordKey } from '@retrysafe/store/redis';
import { useTestDatabase } from '../helpers/database';
import { keyBackendKinds, useKeyBackend } from '../../packages/store/test/helpers/store-backends';
import { jsonResult, newResponseKey, principal, sleep, TEST_SERVICE, testPolicy } from '../../packages/store/test/helpers/store';

describe.runIf(keyBackendKinds.includes('redis'))('key reads of records in Redis', () => {
  const db = useTestDatabase();
  const keys = useKeyBackend('redis', db);
  const storeOf = (service: string) =>
    new IdempotencyStore({ pool: db.pool, backend: keys.backend(), service, fingerprintSecret: Buffer.alloc(32, 3), keyRing: new ResponseKeyRing([newResponseKey()]) });
  const call = (principalId: string, key: string, endpoint: string, status = 201): IdempotentCall => ({
    principalId,
    key,
    endpoint,
    method: 'POST',
    body: { n: 1 },
    policy: testPolicy,
    mode: 'claim-first',
    work: () => Promise.resolve(jsonResult(status, { secret: 'response body' })),
  });
  const reads = () => {
    const redis = keys.redis;
    if (!redis) throw new Error('no redis');
    return new RedisKeyReads(redis.connection.commands, db.pool);
  };

  it('looks a key up across services and scopes, metadata only, and shows another principal nothing', async () => {
    const orders = storeOf(TEST_SERVICE);
    const billing = storeOf('billing');
    for (const [store, endpoint] of [[orders, 'POST /a'], [orders, 'POST /b'], [billing, 'POST /a']] as const) await store.registerRoutePolicy(endpoint, testPolicy, true);
    const p = principal();
    await orders.execute(call(p, 'k', 'POST /a'));
    const { work: _work, mode: _mode, ...claimOnly } = call(p, 'k', 'POST /b');
    const running = await orders.begin(claimOnly);
    expect(running.claimed).toBe(true);
    await billing.execute(call(p, 'k', 'POST /a', 503));
    const found = await reads().keyRecords({ principalId: p, key: 'k' });
    expect(found.map((record) => [record.service, record.scope, record.state, record.statusCode, record.storedAs, record.attempts])).toEqual([
      ['billing', 'POST /a', 'failed', null, null, 1],
      [TEST_SERVICE, 'POST /a', 'completed', 201, 'body', 1],
      [TEST_SERVICE, 'POST /b', 'in_progress', null, null, 1],
    ]);
    for (const record of found) {
      expect(record.fingerprintPrefix).toMatch(/^[0-9a-f]{8}$/);
      expect(Date.parse(record.expiresAt) - Date.parse(record.createdAt)).toBe(testPolicy.retentionMs);
      expect(Object.values(record).every((value: unknown) => value === null || ['string', 'number', 'boolean'].includes(typeof value))).toBe(true);
      expect(JSON.stringify(record)).not.toContain('response body');
    }
    expect(found[2]?.leaseExpiresAt).not.toBeNull();
    expect((await reads().keyRecords({ principalId: p, key: 'k', service: 'billing' })).map((record) => record.service)).toEqual(['billing']);
    expect(await reads().keyRecords({ principalId: principal(), key: 'k' })).toEqual([]);
    expect(await reads().keyRecords({ principalId: p, key: 'never' })).toEqual([]);
  });

  it("lists a principal's keys newest first, a page at a time, by state, skipping records that are gone", async () => {
    const orders = storeOf(TEST_SERVICE);
    const billing = storeOf('billing');
    const p = principal();
    for (const [store, key, status] of [[orders, 'k1', 201], [billing, 'k2', 201], [orders, 'k3', 201], [orders, 'k4', 502], [billing, 'k5', 201]] as const) {
      await store.execute(call(p, key, 'POST /a', status));
      await sleep(3); // distinct creation instants
    }
    const list = reads();
    const first = await list.principalKeys({ principalId: p, limit: 2 });
    expect(first.keys.map((key) => [key.key, key.service])).toEqual([['k5', 'billing'], ['k4', TEST_SERVICE]]);
    expect(first.searchedBackTo).toBeNull();
    const second = await list.principalKeys({ principalId: p, limit: 2, after: first.next ?? undefined });
    expect(second.keys.map((key) => key.key)).toEqual(['k3', 'k2']);
    const third = await list.principalKeys({ principalId: p, limit: 2, after: second.next ?? undefined });
    expect([third.keys.map((key) => key.key), third.next]).toEqual([['k1'], null]);
    expect((await list.principalKeys({ principalId: p, limit: 10, state: 'failed' })).keys.map((key) => key.key)).toEqual(['k4']);
    expect((await list.principalKeys({ principalId: p, limit: 10, service: 'billing' })).keys.map((key) => key.key)).toEqual(['k5', 'k2']);
    // A record Redis has expired (or evicted) is not listed, though its index entry remains.
    await keys.redis?.command('PEXPIRE', recordKey({ principalId: p, service: TEST_SERVICE, scope: 'POST /a', key: 'k3' }), '1');
    await sleep(20);
    expect((await list.principalKeys({ principalId: p, limit: 10 })).keys.map((key) => key.key)).toEqual(['k5', 'k4', 'k2', 'k1']);
    // The index lives as long as the records it lists.
    expect(Number(await keys.redis?.command('PTTL', principalIndexKey(p, TEST_SERVICE)))).toBeGreaterThan(testPolicy.retentionMs - 60_000);
    expect((await list.principalKeys({ principalId: principal(), limit: 10 })).keys).toEqual([]);
  });
});
