// createRetrysafe({ redis }): key records in Redis, everything else in Postgres; and the eviction
// alarm. A Redis that may evict any key (allkeys-*) is refused at start, naming the setting, unless
// told to alert; under volatile-lru a flood that evicts records raises the evictions alert and the
// exported counter; under noeviction a full Redis answers 503, never a silently lost record.
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { createRetrysafe, problemFor, TransactionsUnsupportedError, type IdempotentCall } from '@retrysafe/store';
import { EvictingPolicyError, RedisUnavailableError, recordKey, type RedisMemoryAlert } from '@retrysafe/store/redis';
import { useTestDatabase } from '../helpers/database';
import { hasRedis, startRedis, type TestRedis } from '../helpers/redis';
import { jsonResult, testPolicy } from '../helpers/store';

const responseKeys = `k1:${randomBytes(32).toString('base64')}`;
const SERVICE = 'orders-redis';
const ENDPOINT = 'POST /orders';

describe.runIf(hasRedis)('createRetrysafe with key records in Redis', () => {
  const db = useTestDatabase();
  const servers: TestRedis[] = [];
  afterAll(async () => {
    for (const server of servers) await server.stop();
  });
  const redisWith = async (args: string[] = []) => {
    const server = await startRedis(args);
    servers.push(server);
    return server;
  };
  const options = (url: string) => ({ connectionString: db.url, service: SERVICE, fingerprintSecret: randomBytes(32), responseKeys, metricsFlushIntervalMs: 3_600_000, redis: { url } });
  const call = (principalId: string, key: string, extra: Partial<IdempotentCall> = {}): IdempotentCall => ({
    principalId,
    key,
    endpoint: ENDPOINT,
    method: 'POST',
    body: { sku: 'a', quantity: 1 },
    policy: testPolicy,
    mode: 'claim-first',
    work: () => Promise.resolve(jsonResult(201, { id: randomUUID() })),
    ...extra,
  });

  it('keeps the key records in Redis and the flow metrics in Postgres, refuses transactional requests, and closes what it opened', async () => {
    const redis = await redisWith();
    const retrysafe = await createRetrysafe(options(redis.url));
    const principalId = randomUUID();
    const first = await retrysafe.store.execute(call(principalId, 'a'));
    const replay = await retrysafe.store.execute(call(principalId, 'a'));
    expect(replay.replayed).toBe(true);
    expect(replay.body.equals(first.body)).toBe(true);
    const record = (await redis.command('HGET', recordKey({ principalId, service: SERVICE, scope: ENDPOINT, key: 'a' }), 'state')) as Buffer;
    expect(record.toString()).toBe('completed');
    expect((await db.pool.query('SELECT 1 FROM idempotency_keys WHERE principal_id = $1', [principalId])).rowCount).toBe(0);
    await expect(retrysafe.store.execute(call(principalId, 'tx', { mode: 'transactional' }))).rejects.toBeInstanceOf(TransactionsUnsupportedError);
    expect(retrysafe.redis?.status()).toMatchObject({ memory: { policy: 'noeviction', maxmemoryBytes: 0 }, alerts: [] });
    await retrysafe.stop();
    const flows = await db.pool.query<{ outcome: string; count: string }>(
      'SELECT outcome, sum(count)::text AS count FROM flow_counts_minute WHERE service = $1 GROUP BY outcome ORDER BY outcome',
      [SERVICE],
    );
    expect(flows.rows).toEqual([
      { outcome: 'new', count: '1' },
      { outcome: 'replay', count: '1' },
    ]);
    expect(retrysafe.pool.ended).toBe(true);
    // The store's own connection is closed: only the test's remains.
    const clients = ((await redis.command('CLIENT', 'LIST')) as Buffer).toString().trim().split('\n');
    expect(clients).toHaveLength(1);
  });

  it('fails to start, promptly and saying why, when Redis cannot be reached (rather than waiting for it forever)', async () => {
    const gone = await startRedis();
    await gone.stop();
    const started = Date.now();
    const failed = await createRetrysafe(options(gone.url)).catch((error: unknown) => error);
    expect(failed).toBeInstanceOf(Error);
    expect((failed as Error).message).toMatch(/ECONNREFUSED|connect/i);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('refuses to start on a Redis whose maxmemory-policy is allkeys-*, naming the setting; an explicit option downgrades it to a critical alert', async () => {
    const redis = await redisWith(['--maxmemory', '2mb', '--maxmemory-policy', 'allkeys-lru']);
    const refused = await createRetrysafe(options(redis.url)).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(EvictingPolicyError);
    expect((refused as Error).message).toMatch(/maxmemory-policy is allkeys-lru/);
    const alerts: RedisMemoryAlert[] = [];
    const retrysafe = await createRetrysafe({ ...options(redis.url), redis: { url: redis.url, evictingPolicy: 'alert', onAlert: (alert) => alerts.push(alert) } });
    expect(alerts.map((alert) => [alert.kind, alert.severity])).toEqual([['evicting-policy', 'critical']]);
    expect(retrysafe.redis?.prometheusText()).toContain(`retrysafe_redis_evicting_policy{service="${SERVICE}"} 1`);
    await retrysafe.stop();
  });

  it('under volatile-lru, sees a flood evict records: the evictions alert and the exported counter', async () => {
    const redis = await redisWith(['--maxmemory', '2mb', '--maxmemory-policy', 'volatile-lru']);
    const alerts: RedisMemoryAlert[] = [];
    const retrysafe = await createRetrysafe({ ...options(redis.url), quota: false, redis: { url: redis.url, onAlert: (alert) => alerts.push(alert) } });
    expect(alerts).toEqual([]);
    const principalId = randomUUID();
    const body = 'x'.repeat(800);
    for (let batch = 0; batch < 40; batch += 1) {
      await Promise.all(Array.from({ length: 50 }, (_, i) => retrysafe.store.execute(call(principalId, `flood-${batch}-${i}`, { work: () => Promise.resolve(jsonResult(201, { body })) }))));
    }
    const status = await retrysafe.redis?.check();
    expect(status?.evictedSinceStart).toBeGreaterThan(0);
    expect(status?.alerts.map((alert) => alert.kind)).toContain('evictions');
    expect(alerts.map((alert) => alert.kind)).toContain('evictions');
    const evicted = /retrysafe_redis_evicted_keys_total\{service="orders-redis"\} (\d+)/.exec(retrysafe.redis?.prometheusText() ?? '');
    expect(Number(evicted?.[1])).toBeGreaterThan(0);
    await retrysafe.stop();
  });

  it('under noeviction, answers a full Redis with 503 (nothing decided, a retry is safe) rather than losing a record', async () => {
    const redis = await redisWith(['--maxmemory', '2mb', '--maxmemory-policy', 'noeviction']);
    const retrysafe = await createRetrysafe({ ...options(redis.url), quota: false });
    const principalId = randomUUID();
    const body = 'x'.repeat(800);
    let full: unknown;
    for (let i = 0; i < 10_000 && full === undefined; i += 1) {
      await retrysafe.store.execute(call(principalId, `fill-${i}`, { work: () => Promise.resolve(jsonResult(201, { body })) })).catch((error: unknown) => (full = error));
    }
    expect(full).toBeInstanceOf(RedisUnavailableError);
    expect(problemFor(full)).toMatchObject({ status: 503 });
    const status = await retrysafe.redis?.check();
    expect(status?.evictedSinceStart).toBe(0);
    expect(status?.alerts.map((alert) => alert.kind)).toContain('memory');
    await retrysafe.stop();
  });
});
