// The dashboard's key lookup, a principal's keys and stale claims for services whose key records
// live in Redis and in MariaDB (DASHBOARD_KEYS_REDIS, DASHBOARD_KEYS_MYSQL), through the pools the
// server builds from its environment (createDashboardPools) and the server functions the admin
// routes call: metadata only (a sentinel in every stored body never comes back), audited in
// Postgres before anything is returned (no audit row, no answer), the MySQL reader unable to
// select response_body, the Redis reads only HMGETs of named metadata fields.
import type { Pool, RowDataPacket } from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IdempotencyStore, isDatabaseUnavailable, problemFor, ResponseKeyRing, type IdempotencyBackend, type IdempotentCall } from '@retrysafe/store';
import { createMysqlPool, mysqlDashboardGrants, mysqlKeyReadStatementTexts, mysqlPrincipalKeysStatement, mysqlReaderAccess, MysqlBackend, MysqlKeyReads, MYSQL_DASHBOARD_COLUMNS } from '@retrysafe/store/mysql';
import { inFlightIndexKey, inFlightMember, RedisBackend, RedisKeyReads, recordKey, type RedisCommands } from '@retrysafe/store/redis';
import { DASHBOARD_ROLE } from '../../db/dashboard-access';
import { ConfigurationError, readEnvironment, requireDashboardSettings } from '../../server/config';
import { createDashboardPools, type DashboardPools } from '../../server/dashboard-pools';
import { lookUpCorrelation } from '../../server/idempotency/correlation';
import { overviewQuery, readOverview } from '../../server/metrics/overview';
import { createPrometheusMetrics } from '../../server/metrics/prometheus';
import { sampleKeptElsewhere } from '../../server/metrics/kept-elsewhere-samples';
import { checkKeyBackends } from '../../server/key-backends';
import { unansweredServices } from '../../server/unanswered-services';
import { freePort } from '../../db/embedded';
import { keyListSchema, listPrincipalKeys, listStaleClaims, lookUpKey } from '../../server/idempotency/key-metadata';
import { releaseStaleClaim } from '../../server/retention/stale-claims';
import { useTestDatabase } from '../helpers/database';
import { hasMariaDb, useMariaDb } from '../../packages/store/test/helpers/mariadb';
import { hasRedis, startRedis, type TestRedis } from '../../packages/store/test/helpers/redis';
import { jsonResult, newResponseKey, principal, sleep, testPolicy } from '../../packages/store/test/helpers/store';

const SENTINEL = 'SENTINEL-key-backends-7f3a';
const REDIS_SERVICE = 'orders-redis';
const MYSQL_SERVICE = 'orders-mysql';
const PG_SERVICE = 'orders-pg';
const ENDPOINT = 'POST /orders';
/** An environment of these variables alone. */
const env = (variables: Record<string, string>): NodeJS.ProcessEnv => ({ ...variables }) as NodeJS.ProcessEnv;

describe('the dashboard environment for key backends', () => {
  it('reads DASHBOARD_KEYS_REDIS and DASHBOARD_KEYS_MYSQL as service=URL lists', () => {
    const environment = readEnvironment(env({ DASHBOARD_KEYS_REDIS: 'orders=redis://127.0.0.1:6390, cart=rediss://cache:6380', DASHBOARD_KEYS_MYSQL: 'shop=mysql://reader:pw@db:3306/shop' }));
    expect([...(environment.DASHBOARD_KEYS_REDIS ?? [])]).toEqual([['orders', 'redis://127.0.0.1:6390'], ['cart', 'rediss://cache:6380']]);
    expect([...(environment.DASHBOARD_KEYS_MYSQL ?? [])]).toEqual([['shop', 'mysql://reader:pw@db:3306/shop']]);
    expect(readEnvironment(env({})).DASHBOARD_KEYS_REDIS).toBeUndefined();
  });

  it('refuses a bad entry in one line naming the setting, never the URL', () => {
    const refusal = (source: Record<string, string>): string => {
      try {
        readEnvironment(env(source));
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigurationError);
        return (error as Error).message;
      }
      throw new Error('accepted');
    };
    const wrongProtocol = refusal({ DASHBOARD_KEYS_REDIS: 'orders=mysql://user:hunter2secret@db/shop' });
    expect(wrongProtocol).toMatch(/^Invalid configuration: DASHBOARD_KEYS_REDIS: the URL of orders must be a redis:\/\/ or rediss:\/\/ URL$/);
    expect(wrongProtocol).not.toContain('hunter2secret');
    expect(refusal({ DASHBOARD_KEYS_MYSQL: 'Shop Service=mysql://db/shop' })).toMatch(/^Invalid configuration: DASHBOARD_KEYS_MYSQL: each entry is service=URL/);
    expect(refusal({ DASHBOARD_KEYS_MYSQL: 'mysql://db/shop' })).toMatch(/DASHBOARD_KEYS_MYSQL: each entry is service=URL/);
    expect(refusal({ DASHBOARD_KEYS_REDIS: 'a=redis://h:1,a=redis://h:2' })).toMatch(/DASHBOARD_KEYS_REDIS: a is named twice/);
    const both = refusal({ DASHBOARD_KEYS_REDIS: 'shop=redis://h:1', DASHBOARD_KEYS_MYSQL: 'shop=mysql://db/shop' });
    expect(both).toMatch(/DASHBOARD_KEYS_MYSQL: shop is in both DASHBOARD_KEYS_REDIS and DASHBOARD_KEYS_MYSQL/);
    expect(both.split('\n')).toHaveLength(1);
  });
});

describe.runIf(hasRedis && hasMariaDb)('the dashboard on Redis- and MySQL-kept keys', () => {
  const db = useTestDatabase();
  const mariadb = useMariaDb();
  let redis: TestRedis;
  let owner: Pool;
  let readerUri: string;
  let pools: DashboardPools;
  const stores = new Map<string, IdempotencyStore>();
  // What beforeAll started, for afterAll to stop even when it failed halfway.
  const started: { redis?: TestRedis; pools?: DashboardPools } = {};
  const tenant = principal();

  const call = (key: string, status = 201): IdempotentCall => ({
    principalId: tenant,
    key,
    endpoint: ENDPOINT,
    method: 'POST',
    body: { note: SENTINEL, key },
    policy: testPolicy,
    mode: 'claim-first',
    work: () => Promise.resolve(jsonResult(status, { note: SENTINEL })),
  });
  const storeOf = (service: string): IdempotencyStore => {
    const store = stores.get(service);
    if (!store) throw new Error(`no store for ${service}`);
    return store;
  };
  /** Every key of `keys` in `service`, a few ms apart (distinct creation instants). */
  const create = async (service: string, keys: string[]) => {
    for (const key of keys) {
      await storeOf(service).execute(call(key));
      await sleep(3);
    }
  };

  beforeAll(async () => {
    redis = started.redis = await startRedis();
    owner = mariadb.server.pool(4);
    // The dashboard's MySQL user: SELECT on the metadata columns only (mysqlDashboardGrants).
    const password = 'reader-pw-6c1d';
    await mariadb.server.asRoot([`CREATE USER 'retrysafe_dashboard'@'127.0.0.1' IDENTIFIED BY '${password}'`, ...mysqlDashboardGrants({ user: 'retrysafe_dashboard', host: '127.0.0.1' }, 'service')]);
    readerUri = `mysql://retrysafe_dashboard:${password}@127.0.0.1:${mariadb.server.port}/service`;
    const backends: [string, IdempotencyBackend | undefined][] = [
      [REDIS_SERVICE, new RedisBackend(redis.connection.commands, { db: db.pool })],
      // The backend's database type is mysql2's, not pg's: the store is built as for any service (db: its own type).
      [MYSQL_SERVICE, new MysqlBackend(owner) as unknown as IdempotencyBackend],
      [PG_SERVICE, undefined],
    ];
    for (const [service, backend] of backends) {
      const store = new IdempotencyStore({ pool: db.pool, backend, service, fingerprintSecret: Buffer.alloc(32, 7), keyRing: new ResponseKeyRing([newResponseKey()]) });
      await store.registerRoutePolicy(ENDPOINT, testPolicy, true);
      stores.set(service, store);
    }
    // The server's own path: its environment read and checked, then its pools built from it.
    const settings = requireDashboardSettings(
      readEnvironment(env({ DASHBOARD_DATABASE_URL: db.dashboardUrl, AUTH_SECRET: 'x'.repeat(32), DASHBOARD_KEYS_REDIS: `${REDIS_SERVICE}=${redis.url}`, DASHBOARD_KEYS_MYSQL: `${MYSQL_SERVICE}=${readerUri}` })),
    );
    pools = started.pools = createDashboardPools(settings);
  }, 120_000);
  afterAll(async () => {
    await started.pools?.end();
    await started.redis?.stop();
  });

  it('looks a key up in every backend, metadata only, each lookup audited', async () => {
    await create(REDIS_SERVICE, ['order-1']);
    await create(MYSQL_SERVICE, ['order-1']);
    await create(PG_SERVICE, ['order-1']);
    const records = await lookUpKey(pools.keys, { principalId: tenant, key: 'order-1', reason: 'a customer asks' }, 'ops@example.com');
    expect(records.map((record) => [record.service, record.scope, record.state, record.statusCode, record.storedAs, record.attempts])).toEqual([
      [MYSQL_SERVICE, ENDPOINT, 'completed', 201, 'body', 1],
      [PG_SERVICE, ENDPOINT, 'completed', 201, 'body', 1],
      [REDIS_SERVICE, ENDPOINT, 'completed', 201, 'body', 1],
    ]);
    for (const record of records) {
      expect(record.fingerprintPrefix).toMatch(/^[0-9a-f]{8}$/);
      expect(record.contentType).toBe('application/json');
      expect(record.responseSize).toBeGreaterThan(SENTINEL.length);
      expect(record.secondsLeft).toBeGreaterThan(7_000);
      expect(Date.parse(record.expiresAt) - Date.parse(record.createdAt)).toBeGreaterThanOrEqual(testPolicy.retentionMs - 1);
    }
    expect(JSON.stringify(records)).not.toContain(SENTINEL);
    // One service named: that backend only; another principal sees what an absent key shows.
    for (const service of [REDIS_SERVICE, MYSQL_SERVICE]) {
      const one = await lookUpKey(pools.keys, { principalId: tenant, service, key: 'order-1', reason: `only ${service}` }, 'ops@example.com');
      expect(one.map((record) => record.service)).toEqual([service]);
      expect(await lookUpKey(pools.keys, { principalId: principal(), service, key: 'order-1', reason: 'another tenant' }, 'ops@example.com')).toEqual([]);
    }
    const { rows } = await db.pool.query<{ reason: string; target: unknown; details: unknown }>("SELECT reason, target, details FROM audit_log WHERE action = 'key.lookup' ORDER BY id");
    expect(rows.map((row) => row.reason)).toEqual(['a customer asks', `only ${REDIS_SERVICE}`, 'another tenant', `only ${MYSQL_SERVICE}`, 'another tenant']);
    expect(rows[0]?.details).toMatchObject({ records: 3 });
    expect(rows[1]?.target).toEqual({ principalId: tenant, service: REDIS_SERVICE, key: 'order-1' });
    expect(JSON.stringify(rows)).not.toContain(SENTINEL);
  });

  it('finds a Redis-kept request by its correlation id, metadata only, audited', async () => {
    const answer = await storeOf(REDIS_SERVICE).execute(call('by-correlation'));
    const found = await lookUpCorrelation(pools.keys, { correlationId: answer.correlationId, reason: 'customer quotes the id' }, 'ops@example.com');
    expect(found.records.map((record) => [record.principalId, record.service, record.scope, record.key, record.state, record.statusCode])).toEqual([[tenant, REDIS_SERVICE, ENDPOINT, 'by-correlation', 'completed', 201]]);
    expect(found.unavailable).toBeUndefined();
    expect(JSON.stringify(found)).not.toContain(SENTINEL);
    const { rows } = await db.pool.query<{ target: unknown; details: unknown }>("SELECT target, details FROM audit_log WHERE action = 'key.correlation_lookup' AND reason = 'customer quotes the id'");
    expect(rows).toEqual([{ target: { correlationId: answer.correlationId }, details: { records: 1, attempts: 0, principalId: tenant, service: REDIS_SERVICE, scope: ENDPOINT } }]);
  });

  it('finds a MySQL-kept request by its correlation id through the read-only user, metadata only, audited', async () => {
    const answer = await storeOf(MYSQL_SERVICE).execute(call('by-correlation-mysql'));
    const found = await lookUpCorrelation(pools.keys, { correlationId: answer.correlationId, reason: 'customer quotes a MySQL id' }, 'ops@example.com');
    expect(found.records.map((record) => [record.principalId, record.service, record.scope, record.key, record.state, record.statusCode])).toEqual([
      [tenant, MYSQL_SERVICE, ENDPOINT, 'by-correlation-mysql', 'completed', 201],
    ]);
    expect(found.unavailable).toBeUndefined();
    expect(JSON.stringify(found)).not.toContain(SENTINEL);
    const { rows } = await db.pool.query<{ target: unknown; details: unknown }>("SELECT target, details FROM audit_log WHERE action = 'key.correlation_lookup' AND reason = 'customer quotes a MySQL id'");
    expect(rows).toEqual([{ target: { correlationId: answer.correlationId }, details: { records: 1, attempts: 0, principalId: tenant, service: MYSQL_SERVICE, scope: ENDPOINT } }]);
    // No audit row, no answer.
    await db.pool.query(`REVOKE INSERT ON retrysafe_server.audit_log FROM ${DASHBOARD_ROLE}`);
    try {
      await expect(lookUpCorrelation(pools.keys, { correlationId: answer.correlationId, reason: 'audit refused' }, 'ops@example.com')).rejects.toMatchObject({ code: '42501' });
    } finally {
      await db.pool.query(`GRANT INSERT ON retrysafe_server.audit_log TO ${DASHBOARD_ROLE}`);
    }
  });

  it('answers nothing when the audit row cannot be written', async () => {
    await db.pool.query(`REVOKE INSERT ON retrysafe_server.audit_log FROM ${DASHBOARD_ROLE}`);
    try {
      for (const service of [REDIS_SERVICE, MYSQL_SERVICE]) {
        await expect(lookUpKey(pools.keys, { principalId: tenant, service, key: 'order-1', reason: 'audit refused' }, 'ops@example.com')).rejects.toMatchObject({ code: '42501' });
        await expect(listPrincipalKeys(pools.keys, keyListSchema.parse({ principalId: tenant, service, reason: 'audit refused' }), 'ops@example.com')).rejects.toMatchObject({ code: '42501' });
      }
    } finally {
      await db.pool.query(`GRANT INSERT ON retrysafe_server.audit_log TO ${DASHBOARD_ROLE}`);
    }
  });

  it("lists a principal's keys newest first across backends, a page at a time, audited", async () => {
    const other = principal();
    const list = (fields: Record<string, unknown>) => listPrincipalKeys(pools.keys, keyListSchema.parse({ principalId: other, reason: 'browsing ticket 12', limit: 3, ...fields }), 'ops@example.com');
    // Interleaved: r1 m1 p1 r2 m2 p2 r3, oldest first.
    for (const [service, key] of [[REDIS_SERVICE, 'r1'], [MYSQL_SERVICE, 'm1'], [PG_SERVICE, 'p1'], [REDIS_SERVICE, 'r2'], [MYSQL_SERVICE, 'm2'], [PG_SERVICE, 'p2'], [REDIS_SERVICE, 'r3']] as const) {
      await storeOf(service).execute({ ...call(key), principalId: other });
      await sleep(3);
    }
    const seen: string[] = [];
    let after: unknown;
    for (let page = 0; page < 5; page += 1) {
      const got = await list(after ? { after } : {});
      seen.push(...got.keys.map((key) => key.key));
      expect(JSON.stringify(got)).not.toContain(SENTINEL);
      if (!got.next) break;
      after = got.next;
    }
    expect(seen).toEqual(['r3', 'p2', 'm2', 'r2', 'p1', 'm1', 'r1']);
    // One service named: its backend's list, its own cursor.
    for (const [service, keys] of [[REDIS_SERVICE, ['r3', 'r2', 'r1']], [MYSQL_SERVICE, ['m2', 'm1']]] as const) {
      const first = await list({ service, limit: 2 });
      const rest = first.next ? await list({ service, limit: 2, after: first.next }) : { keys: [] };
      expect([...first.keys, ...rest.keys].map((key) => key.key)).toEqual(keys);
    }
    const { rows } = await db.pool.query<{ n: string }>("SELECT count(*) AS n FROM audit_log WHERE action = 'key.list' AND reason = 'browsing ticket 12'");
    expect(Number(rows[0]?.n)).toBeGreaterThanOrEqual(5);
  });

  it('lists stale claims of the MySQL- and Redis-kept services, neither releasable from the dashboard', async () => {
    const { work: _work, mode: _mode, ...claimOnly } = call('crashed');
    for (const service of [MYSQL_SERVICE, REDIS_SERVICE]) expect((await storeOf(service).begin(claimOnly)).claimed).toBe(true);
    // Their leases passed (the attempts crashed): as the owner of each store.
    await owner.query("UPDATE retrysafe_idempotency_keys SET lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 5 MINUTE WHERE idempotency_key = 'crashed'");
    // (Redis: the record's lease and its entry in the in-flight index, as the claim script wrote them.)
    const passed = String(Date.now() - 300_000);
    await redis.command('HSET', recordKey({ principalId: tenant, service: REDIS_SERVICE, scope: ENDPOINT, key: 'crashed' }), 'lease', passed);
    await redis.command('ZADD', inFlightIndexKey(REDIS_SERVICE, ENDPOINT), 'XX', passed, inFlightMember(tenant, 'crashed'));
    const mysqlClaims = await listStaleClaims(pools.keys, 10, MYSQL_SERVICE);
    // Listed as not releasable from the dashboard (its release answers 501, below).
    expect(mysqlClaims.map((claim) => [claim.service, claim.scope, claim.key, claim.principalId, claim.attempts, claim.releasable])).toEqual([[MYSQL_SERVICE, ENDPOINT, 'crashed', tenant, 1, false]]);
    expect(mysqlClaims[0]?.pastLeaseSeconds).toBeGreaterThanOrEqual(299);
    // Every service: the MySQL one's among them.
    expect((await listStaleClaims(pools.keys, 10)).find((claim) => claim.service === MYSQL_SERVICE)).toMatchObject({ key: 'crashed', releasable: false });
    const redisClaims = await listStaleClaims(pools.keys, 10, REDIS_SERVICE);
    expect(redisClaims.map((claim) => [claim.service, claim.scope, claim.key, claim.principalId, claim.attempts, claim.releasable])).toEqual([[REDIS_SERVICE, ENDPOINT, 'crashed', tenant, 1, false]]);
    expect(redisClaims[0]?.pastLeaseSeconds).toBeGreaterThanOrEqual(299);
    expect((await listStaleClaims(pools.keys, 10)).filter((claim) => claim.key === 'crashed').map((claim) => claim.service).sort()).toEqual([MYSQL_SERVICE, REDIS_SERVICE]);
    // The Redis one shows as stale in its lookup too.
    const [record] = await lookUpKey(pools.keys, { principalId: tenant, service: REDIS_SERVICE, key: 'crashed', reason: 'is it stuck?' }, 'ops@example.com');
    expect(record?.state).toBe('in_progress');
    expect(record?.leasePassedSeconds).toBeGreaterThanOrEqual(299);
    // The dashboard writes to neither: a release says so rather than pretending.
    for (const service of [MYSQL_SERVICE, REDIS_SERVICE]) {
      await expect(releaseStaleClaim(pools.keys, { principalId: tenant, service, scope: ENDPOINT, key: 'crashed' }, 'ops@example.com', 'stuck since noon')).rejects.toMatchObject({ code: 'KEY_READ_UNSUPPORTED' });
    }
  });

  it("shows the overview's store panels of a Redis- and a MySQL-kept service against its baseline: keys and memory, rows and table size", async () => {
    await create(REDIS_SERVICE, ['panel-1', 'panel-2']);
    await create(MYSQL_SERVICE, ['panel-1', 'panel-2']);
    // The baseline: new keys within the scope's retention, from the flow series (the recorder's flush writes them).
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count) VALUES
         (date_trunc('minute', now()) - interval '5 minutes', $1, $3, 'new', 40), (date_trunc('minute', now()) - interval '5 minutes', $2, $3, 'new', 30)`,
      [REDIS_SERVICE, MYSQL_SERVICE, ENDPOINT],
    );
    const overviewOf = (service: string) => readOverview(pools.readPool, overviewQuery.parse({ range: '1h', service }), undefined, undefined, { storeFigures: pools.keys.storeFigures });

    const redisStore = (await overviewOf(REDIS_SERVICE)).storeElsewhere;
    expect(redisStore).toMatchObject({ service: REDIS_SERVICE, backend: 'redis', services: [REDIS_SERVICE], baselineRecords: 40 });
    const keysNow = Number(await redis.command('DBSIZE'));
    if (redisStore?.figures?.backend !== 'redis') throw new Error('no Redis figures');
    expect(redisStore.figures.keys).toBe(keysNow);
    // Every key the store writes expires, but the in-flight indexes (here one: the stale claim's).
    expect(redisStore.figures.keys - redisStore.figures.keysWithExpiry).toBe(Number(await redis.command('EXISTS', inFlightIndexKey(REDIS_SERVICE, ENDPOINT))));
    expect(redisStore.figures.usedMemoryBytes).toBeGreaterThan(0);
    expect(redisStore.figures).toMatchObject({ maxmemoryBytes: 0, policy: 'noeviction', evictedKeys: 0 });
    expect(redisStore.ratio).toBeCloseTo(keysNow / 40);
    expect(redisStore.bytesPerRecord).toBeCloseTo(redisStore.figures.usedMemoryBytes / 40);

    const mysqlStore = (await overviewOf(MYSQL_SERVICE)).storeElsewhere;
    expect(mysqlStore).toMatchObject({ service: MYSQL_SERVICE, backend: 'mysql', services: [MYSQL_SERVICE], baselineRecords: 30 });
    if (mysqlStore?.figures?.backend !== 'mysql') throw new Error('no MySQL figures');
    expect(mysqlStore.figures.dataBytes).toBeGreaterThan(0);
    expect(mysqlStore.figures.indexBytes).toBeGreaterThan(0);
    expect(mysqlStore.figures.oldestRowAgeSeconds).toBeGreaterThan(0);
    expect(mysqlStore.figures.cleanupLagSeconds).toBe(0);
    expect(mysqlStore.figures.estimatedRows).toBeGreaterThanOrEqual(0);
    // Each service's stale claims are its backend's (the crashed claim of the stale-claims case), in place of Postgres's.
    for (const service of [REDIS_SERVICE, MYSQL_SERVICE]) {
      const overview = await overviewOf(service);
      expect(overview.storeElsewhere?.staleClaims).toMatchObject({ count: 1, atLeast: false });
      expect(overview.staleClaims.count).toBe(1);
      expect(overview.staleClaims.oldestPastLeaseSeconds).toBeGreaterThanOrEqual(299);
    }

    // A Postgres-kept service: none (its keys are in the store-wide figures).
    expect((await overviewOf(PG_SERVICE)).storeElsewhere).toBeNull();
    expect((await readOverview(pools.readPool, overviewQuery.parse({ range: '1h' }), undefined, undefined, { storeFigures: pools.keys.storeFigures })).storeElsewhere).toBeNull();
  });

  it("judges the Stale claims check, its alert and /api/metrics on each kept-elsewhere service's backend; one that does not answer is missing, never zero", async () => {
    // The crashed claims of the stale-claims case, 20 minutes past their lease (over the 10-minute rule).
    await owner.query("UPDATE retrysafe_idempotency_keys SET lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 20 MINUTE WHERE idempotency_key = 'crashed'");
    const passed = String(Date.now() - 1_200_000);
    await redis.command('HSET', recordKey({ principalId: tenant, service: REDIS_SERVICE, scope: ENDPOINT, key: 'crashed' }), 'lease', passed);
    await redis.command('ZADD', inFlightIndexKey(REDIS_SERVICE, ENDPOINT), 'XX', passed, inFlightMember(tenant, 'crashed'));
    const overviewOf = (service?: string) =>
      readOverview(pools.readPool, overviewQuery.parse({ range: '1h', ...(service ? { service } : {}) }), undefined, undefined, { storeFigures: pools.keys.storeFigures, staleElsewhere: pools.keys.staleElsewhere });
    const staleChecks = (overview: Awaited<ReturnType<typeof overviewOf>>) => overview.checks.filter((check) => check.name === 'stale_claims').map((check) => [check.state, check.service, check.value]);

    const all = await overviewOf();
    expect(all.alerts.filter((alert) => alert.name === 'stale_claims').map((alert) => [alert.service, alert.summary])).toEqual([
      [MYSQL_SERVICE, `A claim of ${MYSQL_SERVICE} (MySQL) has been past its lease for 20 min`],
      [REDIS_SERVICE, `A claim of ${REDIS_SERVICE} (Redis) has been past its lease for 20 min`],
    ]);
    expect(staleChecks(all)).toEqual([
      ['firing', MYSQL_SERVICE, `${MYSQL_SERVICE} (MySQL): 1, oldest 20 min past its lease`],
      ['firing', REDIS_SERVICE, `${REDIS_SERVICE} (Redis): 1, oldest 20 min past its lease`],
    ]);
    // A chosen service shows its own, not the other backend's.
    expect(staleChecks(await overviewOf(REDIS_SERVICE))).toEqual([['firing', REDIS_SERVICE, `${REDIS_SERVICE} (Redis): 1, oldest 20 min past its lease`]]);
    expect(staleChecks(await overviewOf(PG_SERVICE))).toEqual([['ok', null, 'no sample yet']]);

    const metrics = async () => {
      const { registry } = createPrometheusMetrics(db.pool, undefined, { staleElsewhere: () => pools.keys.staleElsewhere });
      return registry.metrics();
    };
    const up = await metrics();
    for (const [service, backend] of [[MYSQL_SERVICE, 'mysql'], [REDIS_SERVICE, 'redis']] as const) {
      expect(up).toMatch(new RegExp(`^retrysafe_stale_claims\\{service="${service}",backend="${backend}"\\} 1$`, 'm'));
      expect(Number(new RegExp(`^retrysafe_stale_claim_oldest_seconds\\{service="${service}",backend="${backend}"\\} (\\S+)$`, 'm').exec(up)?.[1])).toBeGreaterThanOrEqual(1_199);
      expect(up).toMatch(new RegExp(`^retrysafe_stale_claims_unread\\{service="${service}",backend="${backend}"\\} 0$`, 'm'));
      expect(up).toMatch(new RegExp(`^retrysafe_alert_firing\\{name="stale_claims",severity="warning",service="${service}"\\} 1$`, 'm'));
    }

    // MySQL stops answering (the owner holds the key table: the reader's statements wait).
    const locker = await owner.getConnection();
    try {
      await locker.query('LOCK TABLES retrysafe_idempotency_keys WRITE');
      const started = Date.now();
      const blocked = await overviewOf();
      expect(Date.now() - started).toBeLessThan(4_000);
      expect(blocked.alerts.filter((alert) => alert.name === 'stale_claims').map((alert) => [alert.service, alert.summary])).toEqual([
        [MYSQL_SERVICE, `The stale claims of ${MYSQL_SERVICE} (MySQL) could not be read: its key backend did not answer`],
        [REDIS_SERVICE, `A claim of ${REDIS_SERVICE} (Redis) has been past its lease for 20 min`],
      ]);
      expect(staleChecks(blocked)[0]).toEqual(['firing', MYSQL_SERVICE, `${MYSQL_SERVICE} (MySQL): not answered (its key backend did not answer)`]);
      // Asked again while its read is still out: unanswered at once, without waiting again.
      const again = Date.now();
      expect((await pools.keys.staleElsewhere?.())?.map((reading) => [reading.service, reading.claims === null])).toEqual([
        [MYSQL_SERVICE, true],
        [REDIS_SERVICE, false],
      ]);
      expect(Date.now() - again).toBeLessThan(500);
      const down = await metrics();
      expect(down).not.toMatch(new RegExp(`^retrysafe_stale_claims\\{service="${MYSQL_SERVICE}"`, 'm'));
      expect(down).not.toMatch(new RegExp(`^retrysafe_stale_claim_oldest_seconds\\{service="${MYSQL_SERVICE}"`, 'm'));
      expect(down).toMatch(new RegExp(`^retrysafe_stale_claims_unread\\{service="${MYSQL_SERVICE}",backend="mysql"\\} 1$`, 'm'));
      expect(down).toMatch(new RegExp(`^retrysafe_stale_claims\\{service="${REDIS_SERVICE}",backend="redis"\\} 1$`, 'm'));
    } finally {
      await locker.query('UNLOCK TABLES').catch(() => undefined);
      locker.release();
    }
  }, 60_000);

  it("keeps each kept-elsewhere service's figures a row a minute, which its overview charts; a backend that does not answer is a gap", async () => {
    const sources = pools.keys.storeFigures ?? new Map();
    // The previous case's unanswered MySQL read comes back once its table is unlocked: until then its reader reports it unanswered.
    for (let tries = 0; tries < 50 && (await pools.keys.staleElsewhere?.())?.some((reading) => reading.claims === null); tries += 1) await sleep(100);
    expect(await sampleKeptElsewhere(db.pool, sources, pools.keys.staleElsewhere)).toBe(2);
    // Another instance in the same minute writes nothing more.
    expect(await sampleKeptElsewhere(db.pool, sources, pools.keys.staleElsewhere)).toBe(0);
    const { rows } = await db.pool.query<{ service: string; backend: string; keys: string | null; bytes: string | null; stale_claims: number | null }>(
      'SELECT service, backend, keys, bytes, stale_claims FROM retrysafe_server.kept_elsewhere_samples ORDER BY service',
    );
    // (MySQL's rows are InnoDB's estimate, which a young table may give as 0: a figure all the same, not null.)
    expect(rows.map((row) => [row.service, row.backend, row.keys !== null, Number(row.bytes) > 0, row.stale_claims])).toEqual([
      [MYSQL_SERVICE, 'mysql', true, true, 1],
      [REDIS_SERVICE, 'redis', true, true, 1],
    ]);
    const redisOverview = await readOverview(pools.readPool, overviewQuery.parse({ range: '1h', service: REDIS_SERVICE }), undefined, undefined, { storeFigures: pools.keys.storeFigures });
    const points = redisOverview.storeElsewhereSeries ?? [];
    expect(points.at(-1)).toMatchObject({ keys: Number(rows[1]?.keys), bytes: Number(rows[1]?.bytes), staleClaims: 1 });
    expect((await readOverview(pools.readPool, overviewQuery.parse({ range: '1h', service: PG_SERVICE }), undefined, undefined, { storeFigures: pools.keys.storeFigures })).storeElsewhereSeries).toBeNull();
    // MySQL does not answer: its row of the next minute has no figures (null, not 0).
    await db.pool.query("UPDATE retrysafe_server.kept_elsewhere_samples SET sampled_at = sampled_at - interval '1 minute'");
    const locker = await owner.getConnection();
    try {
      await locker.query('LOCK TABLES retrysafe_idempotency_keys WRITE');
      await sampleKeptElsewhere(db.pool, new Map([...sources].filter(([service]) => service === MYSQL_SERVICE)), pools.keys.staleElsewhere);
    } finally {
      await locker.query('UNLOCK TABLES').catch(() => undefined);
      locker.release();
    }
    const { rows: latest } = await db.pool.query<{ keys: string | null; stale_claims: number | null }>(
      'SELECT keys, stale_claims FROM retrysafe_server.kept_elsewhere_samples WHERE service = $1 ORDER BY sampled_at DESC LIMIT 1',
      [MYSQL_SERVICE],
    );
    expect(latest).toEqual([{ keys: null, stale_claims: null }]);
  }, 60_000);

  it("gives the dashboard's MySQL user no privilege on response bodies", async () => {
    const reader = (await import('mysql2/promise')).createPool({ uri: readerUri, connectionLimit: 1 });
    try {
      await expect(reader.query('SELECT response_body FROM retrysafe_idempotency_keys')).rejects.toMatchObject({ errno: 1143 });
      // MariaDB refuses * as a table privilege it lacks (1142); MySQL 8 names the column (1143).
      const star = await reader.query('SELECT * FROM retrysafe_idempotency_keys').then(() => null, (error: unknown) => (error as { errno?: number }).errno);
      expect([1142, 1143]).toContain(star);
      await expect(reader.query("UPDATE retrysafe_idempotency_keys SET state = 'failed'")).rejects.toMatchObject({ errno: 1142 });
      expect(await mysqlReaderAccess(reader)).toBe('metadata');
      expect(await mysqlReaderAccess(owner)).toBe('bodies');
    } finally {
      await reader.end();
    }
    // The dashboard's statements name no column outside the grant.
    for (const sql of mysqlKeyReadStatementTexts()) expect(sql).not.toMatch(/response_body|\*\s+FROM/i);
    expect(MYSQL_DASHBOARD_COLUMNS).not.toContain('response_body');
  });

  it('reads MySQL in index order, with no sort of what the index returns', async () => {
    const plan = async (sql: string, values: unknown[]) => {
      const [rows] = await owner.query<(RowDataPacket & { table: string | null; key: string | null; Extra: string | null })[]>(`EXPLAIN ${sql}`, values);
      return rows.filter((row) => row.table === 'retrysafe_idempotency_keys');
    };
    const list = mysqlPrincipalKeysStatement({ principalId: tenant, limit: 20, state: 'completed', after: { createdAtMicros: String(Date.now() * 1000), service: MYSQL_SERVICE, scope: ENDPOINT, key: 'k' } });
    const [scan] = await plan(list.sql, list.values);
    expect(scan?.key).toBe('retrysafe_idempotency_keys_principal_created');
    expect(scan?.Extra ?? '').not.toMatch(/filesort/i);
    const [stale] = await plan(mysqlKeyReadStatementTexts()[1] ?? '', [MYSQL_SERVICE, 10]);
    expect(stale?.key).toBe('retrysafe_idempotency_keys_state_lease');
    expect(stale?.Extra ?? '').not.toMatch(/filesort/i);
    const [correlation] = await plan(mysqlKeyReadStatementTexts()[2] ?? '', ['00000000-0000-4000-8000-000000000000']);
    expect(correlation?.key).toBe('retrysafe_idempotency_keys_correlation');
  });

  it('refuses at start a key backend the dashboard cannot use, in one line naming the setting', async () => {
    await expect(checkKeyBackends({ redis: new Map([[REDIS_SERVICE, redis.url]]), mysql: new Map([[MYSQL_SERVICE, readerUri]]) })).resolves.toBeUndefined();
    // The service's own user may read bodies: not the dashboard's.
    const owning = await checkKeyBackends({ mysql: new Map([[MYSQL_SERVICE, mariadb.server.uri]]) }).then(() => null, (error: unknown) => error as Error);
    expect(owning).toBeInstanceOf(ConfigurationError);
    expect(owning?.message).toMatch(/^DASHBOARD_KEYS_MYSQL \(orders-mysql\): its user may select response_body at 127\.0\.0\.1:\d+\/service; /);
    expect(owning?.message).not.toContain(new URL(mariadb.server.uri).password);
    const closed = `redis://127.0.0.1:${await freePort()}`;
    await expect(checkKeyBackends({ redis: new Map([['cart', closed]]) })).rejects.toThrow(/^DASHBOARD_KEYS_REDIS \(cart\): cannot reach Redis at 127\.0\.0\.1:\d+: /);
  });

  it('reads Redis records by HMGET of named metadata fields only', async () => {
    const sent: string[][] = [];
    const recording: RedisCommands = {
      sendCommand: (args) => {
        sent.push(args.map((arg) => arg.toString()));
        return redis.connection.commands.sendCommand(args);
      },
    };
    const reads = new RedisKeyReads(recording, db.pool);
    const [found] = await reads.keyRecords({ principalId: tenant, key: 'order-1' });
    expect(found).toBeDefined();
    expect((await reads.principalKeys({ principalId: tenant, limit: 10 })).keys.length).toBeGreaterThan(0);
    expect(await reads.correlationRecords(found?.correlationId ?? '')).toHaveLength(1);
    await reads.staleClaims(10);
    expect(new Set(sent.map((command) => command[0]))).toEqual(new Set(['TIME', 'HMGET', 'ZRANGE', 'GET']));
    for (const command of sent) expect(command.slice(2)).not.toContain('body');
  });

  it('answers 503 with Retry-After for a named service whose Redis is down, and the other backends for a read naming none', async () => {
    const DOWN_SERVICE = 'cart-redis';
    const down = await startRedis();
    let downPools: DashboardPools | undefined;
    try {
      const store = new IdempotencyStore({ pool: db.pool, backend: new RedisBackend(down.connection.commands, { db: db.pool }), service: DOWN_SERVICE, fingerprintSecret: Buffer.alloc(32, 7), keyRing: new ResponseKeyRing([newResponseKey()]) });
      await store.registerRoutePolicy(ENDPOINT, testPolicy, true);
      const other = principal();
      await store.execute({ ...call('down-1'), principalId: other });
      await storeOf(PG_SERVICE).execute({ ...call('down-1'), principalId: other });
      await storeOf(MYSQL_SERVICE).execute({ ...call('down-1'), principalId: other });
      const settings = requireDashboardSettings(
        readEnvironment(
          env({
            DASHBOARD_DATABASE_URL: db.dashboardUrl,
            AUTH_SECRET: 'x'.repeat(32),
            DASHBOARD_KEYS_REDIS: `${REDIS_SERVICE}=${redis.url},${DOWN_SERVICE}=${down.url}`,
            DASHBOARD_KEYS_MYSQL: `${MYSQL_SERVICE}=${readerUri}`,
          }),
        ),
      );
      const keys = (downPools = createDashboardPools(settings)).keys;
      const lookup = (service?: string) => lookUpKey(keys, { principalId: other, key: 'down-1', reason: 'is it down?', ...(service ? { service } : {}) }, 'ops@example.com');
      // Connected (lazily) while up: then its Redis stops.
      const before = await lookup();
      expect(before.map((record) => record.service)).toEqual([DOWN_SERVICE, MYSQL_SERVICE, PG_SERVICE]);
      expect(unansweredServices(before)).toEqual([]);
      await down.stop();
      // Named: the store's unavailable error, which the routes answer 503 with Retry-After.
      const failure = await lookup(DOWN_SERVICE).then(() => null, (error: unknown) => error);
      expect(isDatabaseUnavailable(failure)).toBe(true);
      expect(problemFor(failure)?.status).toBe(503);
      expect(problemFor(failure)?.headers?.['Retry-After']).toMatch(/^\d+$/);
      const listFailure = await listPrincipalKeys(keys, keyListSchema.parse({ principalId: other, service: DOWN_SERVICE, reason: 'is it down?' }), 'ops@example.com').then(() => null, (error: unknown) => error);
      expect(problemFor(listFailure)?.status).toBe(503);
      // None named: what the others answered, and the one that did not.
      const after = await lookup();
      expect(after.map((record) => record.service)).toEqual([MYSQL_SERVICE, PG_SERVICE]);
      expect(unansweredServices(after)).toEqual([DOWN_SERVICE]);
      const page = await listPrincipalKeys(keys, keyListSchema.parse({ principalId: other, reason: 'is it down?' }), 'ops@example.com');
      expect(page.keys.map((key) => key.service).sort()).toEqual([MYSQL_SERVICE, PG_SERVICE]);
      expect(page.unavailable).toEqual([DOWN_SERVICE]);
      const claims = await listStaleClaims(keys, 10);
      expect(unansweredServices(claims)).toEqual([DOWN_SERVICE]);
      // The overview of that service still answers, its Redis figures said missing.
      const overview = await readOverview(db.pool, overviewQuery.parse({ range: '1h', service: DOWN_SERVICE }), undefined, undefined, { storeFigures: keys.storeFigures });
      expect(overview.storeElsewhere).toMatchObject({ service: DOWN_SERVICE, backend: 'redis', figures: null, ratio: null, staleClaims: null });
    } finally {
      await downPools?.end();
      await down.stop();
    }
  });

  it('answers unavailable, within its timeout, a MySQL read that does not come back', async () => {
    const pool = createMysqlPool(readerUri, 1);
    const locker = await owner.getConnection();
    try {
      await create(MYSQL_SERVICE, ['hung-1']);
      const reads = new MysqlKeyReads(pool, db.pool, { timeoutMs: 1_000 });
      expect(await reads.keyRecords({ principalId: tenant, service: MYSQL_SERVICE, key: 'hung-1' })).toHaveLength(1);
      // The owner holds the key table: the reader's statements wait (a hung server, as the dashboard sees it).
      await locker.query('LOCK TABLES retrysafe_idempotency_keys WRITE');
      for (const read of [() => reads.keyRecords({ principalId: tenant, service: MYSQL_SERVICE, key: 'hung-1' }), () => reads.principalKeys({ principalId: tenant, service: MYSQL_SERVICE, limit: 5 }), () => reads.staleClaims(5, MYSQL_SERVICE)]) {
        const failure = await read().then(() => null, (error: unknown) => error);
        expect(isDatabaseUnavailable(failure)).toBe(true);
        expect(problemFor(failure)?.status).toBe(503);
      }
    } finally {
      await locker.query('UNLOCK TABLES').catch(() => undefined);
      locker.release();
      await pool.end();
    }
  }, 60_000);

  it('refuses at start a Redis Cluster node and a MySQL without the dashboard indexes', async () => {
    const node = await startRedis(['--cluster-enabled', 'yes']);
    try {
      const refusal = await checkKeyBackends({ redis: new Map([['cart', node.url]]) }).then(() => null, (error: unknown) => error as Error);
      expect(refusal).toBeInstanceOf(ConfigurationError);
      expect(refusal?.message).toMatch(/^DASHBOARD_KEYS_REDIS \(cart\): 127\.0\.0\.1:\d+ is a Redis Cluster node; name the cluster as cart=redis\+cluster:\/\/host:port\|host:port\.\.\. \(docs\/deploying\.md\)$/);
    } finally {
      await node.stop();
    }
    await owner.query('ALTER TABLE retrysafe_idempotency_keys DROP INDEX retrysafe_idempotency_keys_state_lease');
    try {
      const refusal = await checkKeyBackends({ mysql: new Map([[MYSQL_SERVICE, readerUri]]) }).then(() => null, (error: unknown) => error as Error);
      expect(refusal).toBeInstanceOf(ConfigurationError);
      expect(refusal?.message).toMatch(/^DASHBOARD_KEYS_MYSQL \(orders-mysql\): .*retrysafe_idempotency_keys_state_lease.*: run `retrysafe migrate --mysql`$/);
      expect(refusal?.message.split('\n')).toHaveLength(1);
    } finally {
      await owner.query('ALTER TABLE retrysafe_idempotency_keys ADD INDEX retrysafe_idempotency_keys_state_lease (state, lease_expires_at)');
    }
    await expect(checkKeyBackends({ mysql: new Map([[MYSQL_SERVICE, readerUri]]) })).resolves.toBeUndefined();
  });
});
