// The dashboard on a service whose key records are in a Redis Cluster
// (DASHBOARD_KEYS_REDIS=service=redis+cluster://host:port|host:port...): the start check reaches the
// cluster and checks the dashboard user's ACL on every master (naming the master that refuses, never
// the password), refuses a cluster named as one server and a single server named as a cluster; the
// backends the server opens read the cluster's records; the correlation-id lookup says the cluster
// keeps no index by correlation id (not "not found").
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRetrysafe, type Retrysafe } from '@retrysafe/store';
import { PostgresKeyReads } from '@retrysafe/store/postgres';
import { CLUSTER_CORRELATION_NOT_KEPT } from '@retrysafe/store/redis';
import { ConfigurationError } from '../../server/config';
import { lookUpCorrelation } from '../../server/idempotency/correlation';
import { checkKeyBackends, openKeyBackends, routedKeyReads } from '../../server/key-backends';
import { useTestDatabase } from '../helpers/database';
import { hasRedis, startRedis } from '../../packages/store/test/helpers/redis';
import { startRedisCluster, type TestRedisCluster } from '../../packages/store/test/helpers/redis-cluster';
import { jsonResult, sleep, testPolicy } from '../../packages/store/test/helpers/store';

const SERVICE = 'orders-cluster';
const ENDPOINT = 'POST /orders';
/** The cluster ACL of docs/redis.md ("A least-privilege Redis user for the dashboard"), password aside. */
const CLUSTER_ACL = ['resetkeys', '~retrysafe:*', 'resetchannels', '-@all', '+hmget', '+zrange', '+time', '+ping', '+info', '+cluster|slots'];

describe.runIf(hasRedis)('the dashboard on a Redis Cluster', () => {
  const db = useTestDatabase();
  let cluster: TestRedisCluster | undefined;
  let retrysafe: Retrysafe | undefined;
  const password = randomBytes(12).toString('hex');
  beforeAll(async () => {
    cluster = await startRedisCluster([], { replicas: 0 });
    for (const node of cluster.nodes) await cluster.command(node.port, 'ACL', 'SETUSER', 'retrysafe_dashboard', 'on', `>${password}`, ...CLUSTER_ACL);
    retrysafe = await createRetrysafe({
      connectionString: db.url,
      service: SERVICE,
      fingerprintSecret: randomBytes(32),
      responseKeys: `k1:${randomBytes(32).toString('base64')}`,
      metricsFlushIntervalMs: 3_600_000,
      redis: { cluster: { nodes: cluster.rootNodes } },
    });
    await retrysafe.store.registerRoutePolicy(ENDPOINT, testPolicy, true);
  });
  afterAll(async () => {
    await retrysafe?.stop();
    await cluster?.stop();
  });
  const nodesOf = (live: TestRedisCluster, credentials = '') => `redis+cluster://${credentials}${live.nodes.map((node) => `127.0.0.1:${node.port}`).join('|')}`;

  it("checks the dashboard user on every master at start, naming the one that refuses, never the password", async () => {
    if (!cluster) throw new Error('no cluster');
    await expect(checkKeyBackends({ redis: new Map([[SERVICE, nodesOf(cluster)]]) })).resolves.toBeUndefined();
    const value = nodesOf(cluster, `retrysafe_dashboard:${password}@`);
    await expect(checkKeyBackends({ redis: new Map([[SERVICE, value]]) })).resolves.toBeUndefined();
    // A master that does not serve the start check's probe key: Redis checks the ACL before it
    // redirects (MOVED), so the refusal is seen there too.
    const owner = await cluster.masterOf('retrysafe:dashboard-start-check');
    const refusing = (await cluster.masterPorts()).find((port) => port !== owner);
    if (refusing === undefined) throw new Error('expected three masters');
    await cluster.command(refusing, 'ACL', 'SETUSER', 'retrysafe_dashboard', '-zrange');
    try {
      const refusal = await checkKeyBackends({ redis: new Map([[SERVICE, value]]) }).then(() => null, (error: unknown) => error as Error);
      expect(refusal).toBeInstanceOf(ConfigurationError);
      expect(refusal?.message).toMatch(new RegExp(`^DASHBOARD_KEYS_REDIS \\(${SERVICE}\\): its user may not send ZRANGE \\(on 127\\.0\\.0\\.1:${refusing}\\) on retrysafe:\\* at the cluster 127\\.0\\.0\\.1:\\d+\\|`));
      expect(refusal?.message).not.toContain(password);
    } finally {
      await cluster.command(refusing, 'ACL', 'SETUSER', 'retrysafe_dashboard', '+zrange');
    }
    // A cluster named as one server, and one server named as a cluster.
    const [first] = cluster.nodes;
    const asServer = await checkKeyBackends({ redis: new Map([[SERVICE, `redis://127.0.0.1:${first?.port}`]]) }).then(() => null, (error: unknown) => error as Error);
    expect(asServer?.message).toMatch(/is a Redis Cluster node; name the cluster as orders-cluster=redis\+cluster:\/\/host:port\|host:port\.\.\./);
    const single = await startRedis();
    try {
      const asCluster = await checkKeyBackends({ redis: new Map([[SERVICE, `redis+cluster://127.0.0.1:${single.port}`]]) }).then(() => null, (error: unknown) => error as Error);
      expect(asCluster).toBeInstanceOf(ConfigurationError);
      expect(asCluster?.message).toMatch(/^DASHBOARD_KEYS_REDIS \(orders-cluster\): (is not a Redis Cluster|cannot reach Redis at the cluster 127\.0\.0\.1:\d+: )/);
    } finally {
      await single.stop();
    }
  });

  it("reads the cluster's records through the backends the server opens, on the dashboard's role, and says the correlation-id lookup is not kept there", async () => {
    if (!cluster || !retrysafe) throw new Error('no cluster');
    const principalId = randomUUID();
    const answer = await retrysafe.store.execute({ principalId, key: 'k1', endpoint: ENDPOINT, method: 'POST', body: { n: 1 }, policy: testPolicy, mode: 'claim-first', work: () => Promise.resolve(jsonResult(201, { secret: 'cluster body' })) });
    // A claim that crashed (its lease passed, never completed), counted in Postgres's quota counters.
    expect((await retrysafe.store.begin({ principalId, key: 'crashed', endpoint: ENDPOINT, method: 'POST', body: { n: 2 }, policy: { ...testPolicy, leaseMs: 50 } })).claimed).toBe(true);
    await retrysafe.quota?.flush();
    await sleep(100);
    // The policies and the quota counters read as the server reads them: the dashboard's restricted role.
    const dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 2 });
    const backends = openKeyBackends({ redis: new Map([[SERVICE, nodesOf(cluster, `retrysafe_dashboard:${password}@`)]]) }, dashboard);
    try {
      expect((await backends.byService.get(SERVICE)?.staleClaims(10, SERVICE))?.map((claim) => [claim.principalId, claim.key])).toEqual([[principalId, 'crashed']]);
      const reads = routedKeyReads(new PostgresKeyReads(dashboard), backends.byService);
      const found = await reads.keyRecords({ principalId, key: 'k1' });
      expect(found.map((record) => [record.service, record.state, record.statusCode])).toEqual([[SERVICE, 'completed', 201]]);
      expect(JSON.stringify(found)).not.toContain('cluster body');
      expect((await reads.principalKeys({ principalId, limit: 5 })).keys.map((key) => key.key)).toEqual(['crashed', 'k1']);
      const figures = await backends.storeFigures.get(SERVICE)?.read();
      expect(figures?.backend === 'redis' ? figures.masters?.length : null).toBe(3);

      const lookup = await lookUpCorrelation({ reads, audit: db.pool, trace: dashboard }, { correlationId: answer.correlationId, reason: 'customer ticket 42' }, 'operator@example.com');
      expect(lookup.records).toEqual([]);
      expect(lookup.notKept).toEqual([{ service: SERVICE, reason: CLUSTER_CORRELATION_NOT_KEPT }]);
    } finally {
      await backends.end();
      await dashboard.end();
    }
  });
});
