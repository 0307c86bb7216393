// The least-privilege Redis user of docs/redis.md for the dashboard: its key lookup, a
// principal's key list, the stale claims, the correlation-id lookup (RedisKeyReads) and the start
// check work through it, and a write or an HGETALL is refused; the start refuses the user of the
// docs before the correlation-id lookup (no GET), naming what it lacks. Redis cannot hide one hash field: HMGET of `body` is allowed to this user
// (shown here, as the docs say), so only the dashboard's code keeps it from asking.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IdempotencyStore, ResponseKeyRing } from '@retrysafe/store';
import { connectRedis, RedisBackend, RedisKeyReads, recordKey, type RedisConnection } from '@retrysafe/store/redis';
import { checkKeyBackends } from '../../server/key-backends';
import { useTestDatabase } from '../helpers/database';
import { hasRedis, startRedis, type TestRedis } from '../../packages/store/test/helpers/redis';
import { jsonResult, newResponseKey, principal, TEST_SERVICE, testPolicy } from '../../packages/store/test/helpers/store';

/** The ACL of docs/redis.md ("A least-privilege Redis user for the dashboard"), password aside. */
const DASHBOARD_ACL = ['resetkeys', '~retrysafe:*', 'resetchannels', '-@all', '+hmget', '+zrange', '+get', '+time', '+ping', '+info'];

describe.runIf(hasRedis)("the dashboard's least-privilege Redis user", () => {
  const db = useTestDatabase();
  const started: { redis?: TestRedis; dashboard?: RedisConnection } = {};
  const password = randomBytes(12).toString('hex');
  const tenant = principal();
  let url = '';
  let correlationId = '';

  beforeAll(async () => {
    const redis = await startRedis();
    started.redis = redis;
    await redis.command('ACL', 'SETUSER', 'retrysafe_dashboard', 'on', `>${password}`, ...DASHBOARD_ACL);
    const store = new IdempotencyStore({ pool: db.pool, backend: new RedisBackend(redis.connection.commands, { db: db.pool }), service: TEST_SERVICE, fingerprintSecret: Buffer.alloc(32, 5), keyRing: new ResponseKeyRing([newResponseKey()]) });
    await store.registerRoutePolicy('POST /a', testPolicy, true);
    ({ correlationId } = await store.execute({ principalId: tenant, key: 'k1', endpoint: 'POST /a', method: 'POST', body: { n: 1 }, policy: testPolicy, mode: 'claim-first', work: () => Promise.resolve(jsonResult(201, { secret: 'acl body' })) }));
    url = `redis://retrysafe_dashboard:${password}@127.0.0.1:${redis.port}`;
    started.dashboard = await connectRedis(url);
  });

  afterAll(async () => {
    await started.dashboard?.close().catch(() => undefined);
    await started.redis?.stop();
  });

  it("answers the dashboard's lookup, key list and start check, and refuses a write and HGETALL", async () => {
    const dashboard = started.dashboard;
    if (!dashboard) throw new Error('not connected');
    const reads = new RedisKeyReads(dashboard.commands, db.pool);
    const found = await reads.keyRecords({ principalId: tenant, key: 'k1' });
    expect(found.map((record) => [record.service, record.scope, record.state, record.statusCode])).toEqual([[TEST_SERVICE, 'POST /a', 'completed', 201]]);
    expect(JSON.stringify(found)).not.toContain('acl body');
    const page = await reads.principalKeys({ principalId: tenant, limit: 10 });
    expect(page.keys.map((key) => key.key)).toEqual(['k1']);
    expect((await reads.correlationRecords(correlationId)).map((record) => record.key)).toEqual(['k1']);
    expect(await reads.staleClaims(10)).toEqual([]);
    await checkKeyBackends({ redis: new Map([[TEST_SERVICE, url]]) });
    // The docs' user before the correlation-id lookup: refused at start, naming the command.
    await started.redis?.command('ACL', 'SETUSER', 'retrysafe_dashboard', '-get');
    const refusal = await checkKeyBackends({ redis: new Map([[TEST_SERVICE, url]]) }).then(() => null, (error: unknown) => error as Error);
    expect(refusal?.message.startsWith(`DASHBOARD_KEYS_REDIS (${TEST_SERVICE}): its user may not send GET on retrysafe:* at 127.0.0.1:`)).toBe(true);
    expect(refusal?.message).toMatch(/:\d+; grant them as docs\/redis\.md says$/);
    await started.redis?.command('ACL', 'SETUSER', 'retrysafe_dashboard', '+get');

    const record = recordKey({ principalId: tenant, service: TEST_SERVICE, scope: 'POST /a', key: 'k1' });
    await expect(dashboard.commands.sendCommand(['HSET', record, 'state', 'failed'])).rejects.toThrow(/NOPERM/);
    await expect(dashboard.commands.sendCommand(['HGETALL', record])).rejects.toThrow(/NOPERM/);
    await expect(dashboard.commands.sendCommand(['DEL', record])).rejects.toThrow(/NOPERM/);
    await expect(dashboard.commands.sendCommand(['HMGET', 'elsewhere:key', 'state'])).rejects.toThrow(/NOPERM/);
    // What Redis cannot refuse: the body field by name (sealed, but readable to this user).
    const [body] = (await dashboard.commands.sendCommand(['HMGET', record, 'body'])) as (Buffer | null)[];
    expect(body).not.toBeNull();
    // Nothing was changed by the refused commands.
    expect(((await started.redis?.command('HMGET', record, 'state')) as Buffer[])[0]?.toString()).toBe('completed');
  });
});
