// createRetrysafe({ redis: { cluster: { nodes } } }): key records on a Redis Cluster, and the
// eviction watch reading every master (INFO sent to each master on its own connection, each
// judged by its own figures): an evicting policy on one master of three is refused, naming it; one master near its
// maxmemory is an alert naming that node, however empty the others are.
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRetrysafe, problemFor } from '@retrysafe/store';
import { connectRedisCluster, EvictingPolicyError, recordKey, RedisBackend, RedisUnavailableError, ReplicationShortfallError, type RedisCommands, type RedisMemoryAlert } from '@retrysafe/store/redis';
import { useTestDatabase } from '../helpers/database';
import { hasRedis } from '../helpers/redis';
import { startRedisCluster, type TestRedisCluster } from '../helpers/redis-cluster';
import { createTestStore, jsonResult, TEST_SERVICE, testPolicy } from '../helpers/store';

const SERVICE = 'orders-cluster';
const ENDPOINT = 'POST /orders';

describe.runIf(hasRedis)('createRetrysafe with key records on a Redis Cluster', () => {
  const db = useTestDatabase();
  let cluster: TestRedisCluster | undefined;
  beforeAll(async () => {
    cluster = await startRedisCluster();
  });
  afterAll(async () => {
    await cluster?.stop();
  });
  const options = (nodes: { url: string }[], extra: { evictingPolicy?: 'alert'; onAlert?: (alert: RedisMemoryAlert) => void } = {}) => ({
    connectionString: db.url,
    service: SERVICE,
    fingerprintSecret: randomBytes(32),
    responseKeys: `k1:${randomBytes(32).toString('base64')}`,
    metricsFlushIntervalMs: 3_600_000,
    redis: { cluster: { nodes }, ...extra },
  });

  it('claims, replays and reads each master for the watch', async () => {
    if (!cluster) throw new Error('no cluster');
    // One node is enough to find the rest.
    const retrysafe = await createRetrysafe(options(cluster.rootNodes.slice(0, 1)));
    try {
      const principals = Array.from({ length: 6 }, () => randomUUID());
      for (const principalId of principals) {
        const call = { principalId, key: 'a', endpoint: ENDPOINT, method: 'POST', body: { sku: 'a' }, policy: testPolicy, mode: 'claim-first' as const, work: () => Promise.resolve(jsonResult(201, { principalId })) };
        const first = await retrysafe.store.execute(call);
        const replay = await retrysafe.store.execute(call);
        expect([first.replayed, replay.replayed, replay.body.equals(first.body)]).toEqual([false, true, true]);
      }
      const live = cluster;
      const masters = new Set(await Promise.all(principals.map((principalId) => live.masterOf(recordKey({ principalId, service: SERVICE, scope: ENDPOINT, key: 'a' })))));
      expect(masters.size).toBeGreaterThan(1);
      const status = retrysafe.redis?.status();
      expect(status?.nodes.map((node) => Number(node.node.split(':')[1])).sort()).toEqual((await live.masterPorts()).sort());
      expect(status?.memory?.policy).toBe('noeviction');
      expect(status?.alerts).toEqual([]);
    } finally {
      await retrysafe.stop();
    }
  });

  it('refuses an evicting policy on one master of three, naming it; alerts on one master near its maxmemory', async () => {
    if (!cluster) throw new Error('no cluster');
    const [, , last] = await cluster.masterPorts();
    if (last === undefined) throw new Error('expected three masters');
    await cluster.command(last, 'CONFIG', 'SET', 'maxmemory-policy', 'allkeys-lru');
    try {
      const refused = await createRetrysafe(options(cluster.rootNodes)).catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(EvictingPolicyError);
      expect((refused as Error).message).toMatch(/maxmemory-policy is allkeys-lru/);
      const alerts: RedisMemoryAlert[] = [];
      const allowed = await createRetrysafe(options(cluster.rootNodes, { evictingPolicy: 'alert', onAlert: (alert) => alerts.push(alert) }));
      await allowed.stop();
      expect(alerts.map((alert) => [alert.kind, alert.message.includes(`127.0.0.1:${last}`)])).toEqual([['evicting-policy', true]]);
    } finally {
      await cluster.command(last, 'CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
    }

    const retrysafe = await createRetrysafe(options(cluster.rootNodes));
    try {
      expect((await retrysafe.redis?.check())?.alerts).toEqual([]);
      // That master's limit just under what it uses: over 90%, whatever the others hold.
      const used = Number(/used_memory:(\d+)/.exec(await cluster.command(last, 'INFO', 'memory'))?.[1]);
      await cluster.command(last, 'CONFIG', 'SET', 'maxmemory', String(Math.floor(used * 1.02)));
      const alerts = (await retrysafe.redis?.check())?.alerts ?? [];
      expect(alerts.map((alert) => [alert.kind, alert.message.includes(`127.0.0.1:${last}`)])).toEqual([['memory', true]]);
    } finally {
      await cluster.command(last, 'CONFIG', 'SET', 'maxmemory', '0');
      await retrysafe.stop();
    }
  });

  it('with waitReplicas, runs the work only once the replicas have the claim; short of them: 503, the work not run, the claim retryable', async () => {
    if (!cluster) throw new Error('no cluster');
    const errors: string[] = [];
    // One secret and key ring for both stores: the second sees the first's records as its own.
    const shared = options([]);
    const withWait = (waitReplicas: number) =>
      createRetrysafe({ ...shared, redis: { cluster: { nodes: cluster?.rootNodes ?? [] }, waitReplicas, waitTimeoutMs: 200 }, onError: (error, context) => errors.push(`${context.task}: ${error instanceof Error ? error.message : String(error)}`) });
    const principalId = randomUUID();
    let runs = 0;
    const call = { principalId, key: 'w', endpoint: ENDPOINT, method: 'POST', body: { sku: 'a' }, policy: testPolicy, mode: 'claim-first' as const, work: () => ((runs += 1), Promise.resolve(jsonResult(201, { runs }))) };
    const stateOf = async () => {
      const port = await cluster?.masterOf(recordKey({ principalId, service: SERVICE, scope: ENDPOINT, key: 'w' }));
      return (await cluster?.command(port ?? 0, 'HMGET', recordKey({ principalId, service: SERVICE, scope: ENDPOINT, key: 'w' }), 'state', 'att'))?.trim().split('\n');
    };
    // Each master has one replica: two never acknowledge.
    const strict = await withWait(2);
    try {
      for (const attempt of [1, 2]) {
        const refused = await strict.store.execute(call).catch((error: unknown) => error);
        expect(refused).toBeInstanceOf(RedisUnavailableError);
        expect((refused as Error).cause).toBeInstanceOf(ReplicationShortfallError);
        expect(problemFor(refused)?.status).toBe(503);
        expect(runs).toBe(0);
        // Marked failed: the next request takes it over at once (no lease to wait for).
        expect(await stateOf()).toEqual(['failed', String(attempt)]);
      }
      expect(errors.filter((error) => error.startsWith('redis replication'))).toHaveLength(2);
    } finally {
      await strict.stop();
    }
    const replicated = await withWait(1);
    try {
      const done = await replicated.store.execute(call);
      expect([done.status, done.replayed, runs]).toEqual([201, false, 1]);
      expect(await stateOf()).toEqual(['completed', '3']);
      expect((await replicated.store.execute(call)).replayed).toBe(true);
    } finally {
      await replicated.stop();
    }
  });

  it('sends each script by EVAL once to each master that lacks it (NOSCRIPT), by EVALSHA after', async () => {
    if (!cluster) throw new Error('no cluster');
    const live = cluster;
    const connection = await connectRedisCluster(live.rootNodes);
    try {
      const sent: string[] = [];
      const counted: RedisCommands = { ...connection.commands, sendCommand: (args) => (sent.push(String(args[0])), connection.commands.sendCommand(args)) };
      const { store } = createTestStore(db.pool, { backend: new RedisBackend(counted, { db: db.pool }) });
      for (const port of await live.masterPorts()) await live.command(port, 'SCRIPT', 'FLUSH');
      // Two principals on each master.
      const byMaster = new Map<number, string[]>();
      while ([...byMaster.values()].filter((principals) => principals.length >= 2).length < 3) {
        const principalId = randomUUID();
        const port = await live.masterOf(recordKey({ principalId, service: TEST_SERVICE, scope: ENDPOINT, key: 'n' }));
        const principals = byMaster.get(port) ?? [];
        if (principals.length < 2) byMaster.set(port, [...principals, principalId]);
      }
      for (const [first, second] of byMaster.values()) {
        for (const [principalId, expected] of [[first, ['EVALSHA', 'EVAL', 'EVALSHA', 'EVAL']], [second, ['EVALSHA', 'EVALSHA']]] as const) {
          sent.length = 0;
          const outcome = await store.execute({ principalId: principalId ?? '', key: 'n', endpoint: ENDPOINT, method: 'POST', body: { sku: 'a' }, policy: testPolicy, mode: 'claim-first', work: () => Promise.resolve(jsonResult(201, {})) });
          expect(outcome.replayed).toBe(false);
          // The claim and the completion: sent by text to a master that had flushed them, by SHA-1 once it has them.
          expect(sent).toEqual(expected);
        }
      }
    } finally {
      await connection.close();
    }
  });
});
