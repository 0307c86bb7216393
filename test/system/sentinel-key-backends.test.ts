// The sentinel check for services whose keys live in Redis and in MariaDB, through the running
// server's admin API (DASHBOARD_KEYS_REDIS, DASHBOARD_KEYS_MYSQL): every stored body carries a
// sentinel; the key lookup, a principal's keys, the stale claims, the correlation-id lookup and
// /api/metrics answer the keys' metadata and never the sentinel, nor does any log line the server wrote.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IdempotencyStore, ResponseKeyRing, type IdempotencyBackend } from '@retrysafe/store';
import { mysqlDashboardGrants, MysqlBackend } from '@retrysafe/store/mysql';
import { RedisBackend } from '@retrysafe/store/redis';
import { useTestDatabase } from '../helpers/database';
import { hasMariaDb, useMariaDb } from '../../packages/store/test/helpers/mariadb';
import { signInEveryRole } from '../helpers/operators';
import { hasRedis, startRedis, type TestRedis } from '../../packages/store/test/helpers/redis';
import { startServer, type RunningServer } from '../helpers/server';
import { jsonResult, newResponseKey, principal, testPolicy } from '../../packages/store/test/helpers/store';

const SENTINEL = 'SENTINEL-9b2e-keys-elsewhere';
const ENDPOINT = 'POST /orders';

describe.runIf(hasRedis && hasMariaDb)('a stored response kept in Redis or MariaDB never leaves but as a replay', () => {
  const db = useTestDatabase();
  const mariadb = useMariaDb();
  const started: { redis?: TestRedis; server?: RunningServer } = {};
  const tenant = principal();
  let cookie = '';
  const correlationIds = new Map<string, string>();

  beforeAll(async () => {
    const redis = (started.redis = await startRedis());
    const password = 'reader-pw-41aa';
    await mariadb.server.asRoot([`CREATE USER 'retrysafe_dashboard'@'127.0.0.1' IDENTIFIED BY '${password}'`, ...mysqlDashboardGrants({ user: 'retrysafe_dashboard', host: '127.0.0.1' }, 'service')]);
    const owner = mariadb.server.pool(2);
    const backends: [string, IdempotencyBackend][] = [
      ['orders-redis', new RedisBackend(redis.connection.commands, { db: db.pool })],
      // The backend's database type is mysql2's, not pg's; the work here uses none.
      ['orders-mysql', new MysqlBackend(owner) as unknown as IdempotencyBackend],
    ];
    for (const [service, backend] of backends) {
      const store = new IdempotencyStore({ pool: db.pool, backend, service, fingerprintSecret: Buffer.alloc(32, 9), keyRing: new ResponseKeyRing([newResponseKey()]) });
      await store.registerRoutePolicy(ENDPOINT, testPolicy, true);
      const outcome = await store.execute({
        principalId: tenant,
        key: 'sentinel-order',
        endpoint: ENDPOINT,
        method: 'POST',
        body: { note: SENTINEL },
        policy: testPolicy,
        mode: 'claim-first',
        work: () => Promise.resolve(jsonResult(201, { note: SENTINEL })),
      });
      expect([outcome.status, outcome.replayed]).toEqual([201, false]);
      correlationIds.set(service, outcome.correlationId);
      // And one claim whose attempt crashed, past its lease.
      expect((await store.begin({ principalId: tenant, key: 'crashed', endpoint: ENDPOINT, method: 'POST', body: { note: SENTINEL }, policy: { ...testPolicy, leaseMs: 1 } })).claimed).toBe(true);
    }
    started.server = await startServer(db.url, {
      DEMO_TRAFFIC: '0',
      DASHBOARD_KEYS_REDIS: `orders-redis=${redis.url}`,
      DASHBOARD_KEYS_MYSQL: `orders-mysql=mysql://retrysafe_dashboard:${password}@127.0.0.1:${mariadb.server.port}/service`,
    });
    cookie = (await signInEveryRole(db, started.server.baseUrl, 'keys-elsewhere.example')).get('operator') ?? '';
  }, 600_000);
  afterAll(async () => {
    await started.server?.stop();
    await started.redis?.stop();
  });

  it('answers the keys\' metadata through the admin API, never the body', async () => {
    const server = started.server;
    if (!server) throw new Error('no server');
    const base = server.baseUrl;
    const post = async (path: string, body: unknown) => {
      const response = await fetch(`${base}${path}`, { method: 'POST', headers: { cookie, origin: base, 'content-type': 'application/json' }, body: JSON.stringify(body) });
      return { status: response.status, text: await response.text() };
    };
    const get = async (path: string) => {
      const response = await fetch(`${base}${path}`, { headers: { cookie } });
      return { status: response.status, text: await response.text() };
    };
    const lookup = await post('/api/admin/keys/lookup', { principalId: tenant, key: 'sentinel-order', reason: 'sentinel check' });
    expect(lookup.status).toBe(200);
    expect((JSON.parse(lookup.text) as { records: { service: string; state: string; statusCode: number }[] }).records.map((record) => [record.service, record.state, record.statusCode])).toEqual([
      ['orders-mysql', 'completed', 201],
      ['orders-redis', 'completed', 201],
    ]);
    const list = await post('/api/admin/keys/list', { principalId: tenant, reason: 'sentinel check' });
    expect(list.status).toBe(200);
    expect((JSON.parse(list.text) as { keys: { key: string }[] }).keys.map((key) => key.key).sort()).toEqual(['crashed', 'crashed', 'sentinel-order', 'sentinel-order']);
    const stale = await get('/api/admin/stale-claims?service=orders-mysql');
    expect(stale.status).toBe(200);
    expect((JSON.parse(stale.text) as { claims: { key: string }[] }).claims.map((claim) => claim.key)).toEqual(['crashed']);
    const redisStale = await get('/api/admin/stale-claims?service=orders-redis');
    expect(redisStale.status).toBe(200);
    expect((JSON.parse(redisStale.text) as { claims: { key: string }[] }).claims.map((claim) => claim.key)).toEqual(['crashed']);
    const correlation = await post('/api/admin/keys/correlation', { correlationId: correlationIds.get('orders-redis'), reason: 'sentinel check' });
    expect(correlation.status).toBe(200);
    expect((JSON.parse(correlation.text) as { records: { service: string; key: string }[] }).records.map((record) => [record.service, record.key])).toEqual([['orders-redis', 'sentinel-order']]);
    const mysqlCorrelation = await post('/api/admin/keys/correlation', { correlationId: correlationIds.get('orders-mysql'), reason: 'sentinel check' });
    expect(mysqlCorrelation.status).toBe(200);
    expect((JSON.parse(mysqlCorrelation.text) as { records: { service: string; key: string }[] }).records.map((record) => [record.service, record.key])).toEqual([['orders-mysql', 'sentinel-order']]);
    // /api/metrics: each service's stale claims from its backend (the crashed claim), read.
    const metrics = await get('/api/metrics');
    expect(metrics.status).toBe(200);
    for (const [service, backend] of [['orders-mysql', 'mysql'], ['orders-redis', 'redis']]) {
      expect(metrics.text).toContain(`retrysafe_stale_claims{service="${service}",backend="${backend}"} 1`);
      expect(metrics.text).toContain(`retrysafe_stale_claims_unread{service="${service}",backend="${backend}"} 0`);
    }
    // The overview of each: its backend's keys against the baseline, its stale claim counted there.
    const overviews = await Promise.all(['orders-redis', 'orders-mysql'].map((service) => get(`/api/admin/overview?service=${service}`)));
    for (const [i, answer] of overviews.entries()) {
      expect(answer.status).toBe(200);
      const overview = JSON.parse(answer.text) as { storeElsewhere: { backend: string; figures: unknown } | null; staleClaims: { count: number } };
      expect([overview.storeElsewhere?.backend, overview.storeElsewhere?.figures === null, overview.staleClaims.count]).toEqual([i === 0 ? 'redis' : 'mysql', false, 1]);
    }
    const every = await get('/api/admin/stale-claims?limit=500');
    expect(every.status).toBe(200);
    const pages = await Promise.all(['/keys', '/claims', '/?service=orders-redis', '/?service=orders-mysql'].map((path) => get(path)));
    for (const page of pages) expect(page.status).toBe(200);
    expect(pages[2]?.text).toContain('Keys in Redis');
    expect(pages[3]?.text).toContain('Keys in MySQL');
    for (const answer of [lookup, list, stale, redisStale, correlation, mysqlCorrelation, metrics, every, ...overviews, ...pages]) expect(answer.text).not.toContain(SENTINEL);
    expect(server.output()).not.toContain(SENTINEL);
  });
});
