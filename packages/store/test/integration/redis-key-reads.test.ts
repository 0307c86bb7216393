// The dashboard's key lookup and a principal's key list for records kept in Redis (RedisKeyReads):
// every record of (principal, key) across the services and scopes the policies know, metadata
// only; another principal's key is as absent as one never used; the list newest first, a page at
// a time by cursor, filtered by state, skipping records Redis has expired or evicted, from the
// principal's index (no SCAN); stale claims oldest lease first and a correlation id's record from
// the indexes the scripts keep on one server (in flight by lease, correlation id to record).
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { IdempotencyStore, namePrincipal, newCorrelationId, ResponseKeyRing, type IdempotentCall } from '@retrysafe/store';
import type { ClaimValues } from '@retrysafe/store/postgres';
import { correlationIndexKey, inFlightIndexKey, inFlightMember, principalIndexKey, RedisBackend, RedisKeyReads, recordKey } from '@retrysafe/store/redis';
import { useTestDatabase } from '../helpers/database';
import { keyBackendKinds, useKeyBackend } from '../helpers/store-backends';
import { jsonResult, newResponseKey, principal, sleep, TEST_SERVICE, testPolicy } from '../helpers/store';

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

  const CLAIMS_SERVICE = 'stale-claims';
  /** A claim's values in `service`, with a lease of `leaseMs`. */
  const claimOf = (service: string, principalId: string, scope: string, key: string, leaseMs: number): ClaimValues => ({
    principalId,
    service,
    scope,
    key,
    fingerprint: randomBytes(32),
    correlationId: newCorrelationId(),
    leaseMs,
    retentionMs: testPolicy.retentionMs,
  });
  const backend = () => {
    const redis = keys.redis;
    if (!redis) throw new Error('no redis');
    return new RedisBackend(redis.connection.commands, { db: db.pool });
  };

  it('lists claims past their lease, oldest lease first, from the in-flight index (no SCAN), and not those completed, failed or running', async () => {
    // A service of this case's own: the other cases' claims (leases of 10 s) stay out of its list.
    const store = storeOf(CLAIMS_SERVICE);
    for (const endpoint of ['POST /a', 'POST /b']) await store.registerRoutePolicy(endpoint, testPolicy, true);
    const redis = backend();
    const p = principal();
    const q = principal();
    // Four attempts that crash (short leases, in two scopes and two principals), one that runs, one completed, one failed.
    for (const [who, scope, key, leaseMs] of [[p, 'POST /a', 'crash-1', 30], [q, 'POST /b', 'crash-2', 60], [p, 'POST /b', 'crash-3', 90], [q, 'POST /a', 'crash-4', 120]] as const) {
      expect((await redis.claim(claimOf(CLAIMS_SERVICE, who, scope, key, leaseMs))).claimed).toBe(true);
    }
    expect((await redis.claim(claimOf(CLAIMS_SERVICE, p, 'POST /a', 'running', 60_000))).claimed).toBe(true);
    const done = claimOf(CLAIMS_SERVICE, p, 'POST /a', 'done', 30);
    await redis.claim(done);
    expect(await redis.complete({ ...done, attempts: 1, status: 201, contentType: 'application/json', body: Buffer.from('sealed'), keyId: 'k1', size: 6, reference: null })).toBe(true);
    const failed = claimOf(CLAIMS_SERVICE, q, 'POST /b', 'failed', 30);
    await redis.claim(failed);
    expect(await redis.fail(failed, 1)).toBe(true);
    await sleep(200);

    const stale = await reads().staleClaims(10, CLAIMS_SERVICE);
    expect(stale.map((claim) => [claim.key, claim.principalId, claim.scope, claim.attempts])).toEqual([
      ['crash-1', p, 'POST /a', 1],
      ['crash-2', q, 'POST /b', 1],
      ['crash-3', p, 'POST /b', 1],
      ['crash-4', q, 'POST /a', 1],
    ]);
    for (const claim of stale) {
      expect(claim.service).toBe(CLAIMS_SERVICE);
      expect(claim.pastLeaseSeconds).toBeGreaterThanOrEqual(0);
      expect(claim.correlationId).toMatch(/^[0-9a-f-]{36}$/);
      expect(Date.parse(claim.leaseExpiredAt)).toBeGreaterThan(Date.parse(claim.createdAt));
    }
    expect((await reads().staleClaims(2, CLAIMS_SERVICE)).map((claim) => claim.key)).toEqual(['crash-1', 'crash-2']);
    expect(await reads().staleClaims(10, 'billing')).toEqual([]);
    // Only what is in flight stays in the index: the completed and failed attempts left it.
    const members = (scope: string) => keys.redis?.command('ZRANGE', inFlightIndexKey(CLAIMS_SERVICE, scope), '0', '-1') as Promise<Buffer[]>;
    expect((await members('POST /a')).map(String).sort()).toEqual([inFlightMember(p, 'crash-1'), inFlightMember(q, 'crash-4'), inFlightMember(p, 'running')].sort());
    expect((await members('POST /b')).map(String).sort()).toEqual([inFlightMember(q, 'crash-2'), inFlightMember(p, 'crash-3')].sort());

    // A takeover is in flight again under its new lease; its completion leaves the list.
    const retry = claimOf(CLAIMS_SERVICE, p, 'POST /a', 'crash-1', 60_000);
    expect(await redis.takeOver(retry, 1)).toBe(2);
    expect((await reads().staleClaims(10, CLAIMS_SERVICE)).map((claim) => claim.key)).toEqual(['crash-2', 'crash-3', 'crash-4']);
    expect(await redis.complete({ ...retry, attempts: 2, status: 201, contentType: 'application/json', body: null, keyId: null, size: 0, reference: 'ref-1' })).toBe(true);
    expect((await members('POST /a')).map(String).sort()).toEqual([inFlightMember(q, 'crash-4'), inFlightMember(p, 'running')].sort());
    // A record gone (expired) is passed over though its entry remains until a claim trims it.
    await keys.redis?.command('DEL', recordKey({ principalId: q, service: CLAIMS_SERVICE, scope: 'POST /b', key: 'crash-2' }));
    expect((await reads().staleClaims(10, CLAIMS_SERVICE)).map((claim) => claim.key)).toEqual(['crash-3', 'crash-4']);
    // The scope's next claim trims entries whose lease ended longer ago than its retention (their records have expired).
    await keys.redis?.command('ZADD', inFlightIndexKey(CLAIMS_SERVICE, 'POST /b'), String(Date.now() - testPolicy.retentionMs - 60_000), inFlightMember(q, 'long-gone'));
    await redis.claim(claimOf(CLAIMS_SERVICE, p, 'POST /b', 'next', 60_000));
    expect((await members('POST /b')).map(String).sort()).toEqual([inFlightMember(q, 'crash-2'), inFlightMember(p, 'crash-3'), inFlightMember(p, 'next')].sort());
    // An index left empty is gone: it holds only what is in flight or stale.
    for (const key of ['crash-3', 'next']) await redis.fail({ principalId: p, service: CLAIMS_SERVICE, scope: 'POST /b', key }, 1);
    await keys.redis?.command('ZREM', inFlightIndexKey(CLAIMS_SERVICE, 'POST /b'), inFlightMember(q, 'crash-2'));
    expect(Number(await keys.redis?.command('EXISTS', inFlightIndexKey(CLAIMS_SERVICE, 'POST /b')))).toBe(0);
  });

  it("finds a correlation id's record through its index (GET), the current attempt's id only, with the principal's name", async () => {
    const store = storeOf(TEST_SERVICE);
    await store.registerRoutePolicy('POST /a', testPolicy, true);
    const p = principal();
    await namePrincipal(db.pool, p, 'Acme Ltd');
    const answer = await store.execute(call(p, 'k-corr', 'POST /a'));
    const [record] = await reads().correlationRecords(answer.correlationId);
    expect(record).toMatchObject({ principalId: p, principalName: 'Acme Ltd', key: 'k-corr', service: TEST_SERVICE, scope: 'POST /a', state: 'completed', statusCode: 201, correlationId: answer.correlationId });
    expect(JSON.stringify(record)).not.toContain('response body');
    // Its index entry expires with the record.
    const recordTtl = Number(await keys.redis?.command('PTTL', recordKey({ principalId: p, service: TEST_SERVICE, scope: 'POST /a', key: 'k-corr' })));
    const indexTtl = Number(await keys.redis?.command('PTTL', correlationIndexKey(answer.correlationId)));
    expect(Math.abs(recordTtl - indexTtl)).toBeLessThan(1_000);
    expect(await reads().correlationRecords(newCorrelationId())).toEqual([]);

    // A takeover's new id names the record; the crashed attempt's id no longer does (as on Postgres).
    const redis = backend();
    const crashed = claimOf(TEST_SERVICE, p, 'POST /a', 'k-taken', 10);
    await redis.claim(crashed);
    await sleep(30);
    const retry = claimOf(TEST_SERVICE, p, 'POST /a', 'k-taken', 60_000);
    expect(await redis.takeOver(retry, 1)).toBe(2);
    expect(await reads().correlationRecords(crashed.correlationId)).toEqual([]);
    const [taken] = await reads().correlationRecords(retry.correlationId);
    expect(taken).toMatchObject({ key: 'k-taken', state: 'in_progress', attempts: 2, takeovers: 1, correlationId: retry.correlationId });
    const takenTtl = Number(await keys.redis?.command('PTTL', correlationIndexKey(retry.correlationId)));
    expect(takenTtl).toBeGreaterThan(testPolicy.retentionMs - 60_000);
    expect(takenTtl).toBeLessThanOrEqual(testPolicy.retentionMs);
  });

  it('writes no dashboard index when told not to (a cluster, where they would sit outside the hash slot)', async () => {
    const redis = keys.redis;
    if (!redis) throw new Error('no redis');
    const plain = new RedisBackend(redis.connection.commands, { db: db.pool, dashboardIndexes: false });
    const claim = { ...claimOf(TEST_SERVICE, principal(), 'POST /z', 'k', 10), service: 'no-index' };
    expect((await plain.claim(claim)).claimed).toBe(true);
    expect(await plain.complete({ ...claim, attempts: 1, status: 201, contentType: 'application/json', body: null, keyId: null, size: 0, reference: 'r' })).toBe(true);
    expect(Number(await redis.command('EXISTS', inFlightIndexKey('no-index', 'POST /z'), correlationIndexKey(claim.correlationId)))).toBe(0);
    expect(((await redis.command('HMGET', recordKey(claim), 'state')) as Buffer[])[0]?.toString()).toBe('completed');
  });
});
