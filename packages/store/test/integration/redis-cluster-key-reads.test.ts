// The dashboard's reads of key records kept in a Redis Cluster (RedisKeyReads on a
// connectRedisCluster connection), on a real 3-master cluster: a key's lookup and a principal's
// keys through the cluster client (metadata only: no command names `body`, no HGETALL); stale
// claims from each principal's in-flight set in the record's slot (principalInFlightKey), the
// principals found in Postgres's quota counters; the store's figures of every master, summed,
// the fullest named; and the correlation-id lookup saying it is not kept, never "not found".
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRetrysafe, KeyReadUnsupportedError, type EndpointPolicy, type IdempotentCall, type Retrysafe } from '@retrysafe/store';
import { CLUSTER_CORRELATION_NOT_KEPT, connectRedisCluster, principalInFlightKey, recordKey, recordMember, RedisKeyReads, type RedisClusterConnection, type RedisCommands } from '@retrysafe/store/redis';
import { useTestDatabase } from '../helpers/database';
import { hasRedis } from '../helpers/redis';
import { startRedisCluster, type TestRedisCluster } from '../helpers/redis-cluster';
import { jsonResult, sleep, testPolicy } from '../helpers/store';

const SERVICE = 'orders-cluster-reads';
const ENDPOINT = 'POST /orders';
const shortLease: EndpointPolicy = { ...testPolicy, leaseMs: 50 };

/** Every command a read sends, recorded on its way to the real cluster (not a stand-in: the replies are the cluster's). */
function recorded(commands: RedisCommands): { commands: RedisCommands; sent: string[][] } {
  const sent: string[][] = [];
  const eachMaster = commands.eachMaster?.bind(commands);
  return {
    sent,
    commands: {
      sendCommand: (args) => {
        sent.push(args.map(String));
        return commands.sendCommand(args);
      },
      ...(eachMaster ? { eachMaster } : {}),
    },
  };
}

describe.runIf(hasRedis)('key reads of records in a Redis Cluster', () => {
  const db = useTestDatabase();
  let cluster: TestRedisCluster | undefined;
  let retrysafe: Retrysafe | undefined;
  let connection: RedisClusterConnection | undefined;
  beforeAll(async () => {
    cluster = await startRedisCluster([], { replicas: 0 });
    retrysafe = await createRetrysafe({
      connectionString: db.url,
      service: SERVICE,
      fingerprintSecret: randomBytes(32),
      responseKeys: `k1:${randomBytes(32).toString('base64')}`,
      metricsFlushIntervalMs: 3_600_000,
      redis: { cluster: { nodes: cluster.rootNodes } },
    });
    await retrysafe.store.registerRoutePolicy(ENDPOINT, testPolicy, true);
    await retrysafe.store.registerRoutePolicy('POST /refunds', testPolicy, true);
    connection = await connectRedisCluster(cluster.rootNodes);
  });
  afterAll(async () => {
    await connection?.close();
    await retrysafe?.stop();
    await cluster?.stop();
  });
  const live = () => {
    if (!retrysafe || !connection || !cluster) throw new Error('no cluster');
    return { retrysafe, connection, cluster };
  };
  const call = (principalId: string, key: string, endpoint = ENDPOINT, policy: EndpointPolicy = testPolicy): IdempotentCall => ({
    principalId,
    key,
    endpoint,
    method: 'POST',
    body: { key },
    policy,
    mode: 'claim-first',
    work: () => Promise.resolve(jsonResult(201, { secret: 'response body' })),
  });

  it("looks a key up and lists a principal's keys across the masters, metadata only", async () => {
    const { retrysafe, connection, cluster } = live();
    const principals = Array.from({ length: 6 }, () => randomUUID());
    for (const principalId of principals) {
      for (const key of ['k1', 'k2', 'k3']) {
        await retrysafe.store.execute(call(principalId, key));
        await sleep(2); // distinct creation instants
      }
    }
    // The records are spread over the masters (the hash tag is per principal).
    const masters = new Set(await Promise.all(principals.map((principalId) => cluster.masterOf(recordKey({ principalId, service: SERVICE, scope: ENDPOINT, key: 'k1' })))));
    expect(masters.size).toBeGreaterThan(1);

    const { commands, sent } = recorded(connection.commands);
    const reads = new RedisKeyReads(commands, db.pool);
    for (const principalId of principals) {
      const [record, ...others] = await reads.keyRecords({ principalId, key: 'k2' });
      expect(others).toEqual([]);
      expect(record).toMatchObject({ service: SERVICE, scope: ENDPOINT, state: 'completed', statusCode: 201, storedAs: 'body', attempts: 1 });
      expect(JSON.stringify(record)).not.toContain('response body');
      const first = await reads.principalKeys({ principalId, limit: 2 });
      expect(first.keys.map((key) => key.key)).toEqual(['k3', 'k2']);
      const second = await reads.principalKeys({ principalId, limit: 2, after: first.next ?? undefined });
      expect([second.keys.map((key) => key.key), second.next]).toEqual([['k1'], null]);
    }
    expect(await reads.keyRecords({ principalId: randomUUID(), key: 'k1' })).toEqual([]);
    // Named fields only: never the body, never the whole hash.
    expect(sent.length).toBeGreaterThan(0);
    expect(sent.filter((args) => args.includes('body') || args[0] === 'HGETALL' || args[0] === 'HGET')).toEqual([]);
  });

  it("lists claims past their lease from each principal's in-flight set, found through Postgres's quota counters", async () => {
    const { retrysafe, connection, cluster } = live();
    const p = randomUUID();
    const q = randomUUID();
    // Claims that crash (never completed) under a 50 and an 80 ms lease, one that runs, one completed, one failed.
    // The leases differ so that their ends do: two claims a fraction of a millisecond apart would end
    // in the same millisecond, and the order of a tie is not the oldest-first this test checks.
    const { work: _work, mode: _mode, ...crash1 } = call(p, 'crash-1', ENDPOINT, shortLease);
    expect((await retrysafe.store.begin(crash1)).claimed).toBe(true);
    const { work: _work2, mode: _mode2, ...crash2 } = call(q, 'crash-2', 'POST /refunds', { ...shortLease, leaseMs: 80 });
    expect((await retrysafe.store.begin(crash2)).claimed).toBe(true);
    const { work: _work3, mode: _mode3, ...running } = call(q, 'running');
    expect((await retrysafe.store.begin(running)).claimed).toBe(true);
    await retrysafe.store.execute(call(p, 'done', ENDPOINT, shortLease));
    const failed = await retrysafe.store.execute({ ...call(q, 'failed', ENDPOINT, shortLease), work: () => Promise.reject(new Error('handler crashed')) }).catch(() => null);
    expect(failed).toBeNull();
    await retrysafe.quota?.flush();
    await sleep(200);

    const reads = new RedisKeyReads(connection.commands, db.pool);
    const stale = await reads.staleClaims(10, SERVICE);
    expect(stale.map((claim) => [claim.key, claim.principalId, claim.scope, claim.attempts])).toEqual([
      ['crash-1', p, ENDPOINT, 1],
      ['crash-2', q, 'POST /refunds', 1],
    ]);
    expect(stale.every((claim) => claim.pastLeaseSeconds >= 0 && Date.parse(claim.leaseExpiredAt) < Date.now())).toBe(true);
    // Every service's (no service named) finds them too.
    expect((await reads.staleClaims(10)).filter((claim) => claim.service === SERVICE).map((claim) => claim.key)).toEqual(['crash-1', 'crash-2']);
    // The set is in the record's slot, and expires (a principal that stops claiming leaves nothing behind).
    const set = principalInFlightKey(q, SERVICE);
    expect(await cluster.masterOf(set)).toBe(await cluster.masterOf(recordKey({ principalId: q, service: SERVICE, scope: ENDPOINT, key: 'running' })));
    const ttl = Number(await connection.commands.sendCommand(['PTTL', set]));
    expect(ttl).toBeGreaterThan(testPolicy.retentionMs - 60_000);
    expect((await connection.commands.sendCommand(['ZRANGE', set, '0', '-1'])) as Buffer[]).toHaveLength(2); // crash-2 and running

    // A takeover is in flight again; its completion leaves the list, and the set keeps an expiry.
    await retrysafe.store.execute(call(p, 'crash-1', ENDPOINT));
    expect((await reads.staleClaims(10, SERVICE)).map((claim) => claim.key)).toEqual(['crash-2']);
    const own = ((await connection.commands.sendCommand(['ZRANGE', principalInFlightKey(p, SERVICE), '0', '-1'])) as Buffer[]).map(String);
    expect(own).not.toContain(recordMember(ENDPOINT, 'crash-1'));
  });

  it("takes over a failed claim with the in-flight set given the record's expiry again", async () => {
    const { retrysafe, connection } = live();
    const p = randomUUID();
    // The failure mark removes the set's only entry, and the set with it: the takeover's entry needs an expiry of its own.
    await retrysafe.store.execute({ ...call(p, 'retry-me', ENDPOINT), work: () => Promise.reject(new Error('handler crashed')) }).catch(() => undefined);
    const set = principalInFlightKey(p, SERVICE);
    expect(Number(await connection.commands.sendCommand(['EXISTS', set]))).toBe(0);
    const { work: _work, mode: _mode, ...again } = call(p, 'retry-me', ENDPOINT);
    const begun = await retrysafe.store.begin(again);
    expect(begun.claimed).toBe(true);
    const ttl = Number(await connection.commands.sendCommand(['PTTL', set]));
    const recordTtl = Number(await connection.commands.sendCommand(['PTTL', recordKey({ principalId: p, service: SERVICE, scope: ENDPOINT, key: 'retry-me' })]));
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeGreaterThanOrEqual(recordTtl - 1_000);
  });

  it("sums the store's figures over the masters and names the fullest against its maxmemory", async () => {
    const { connection, cluster } = live();
    const reads = new RedisKeyReads(connection.commands, db.pool);
    const [, tight] = await cluster.masterPorts();
    if (tight === undefined) throw new Error('expected three masters');
    const used = Number(/used_memory:(\d+)/.exec(await cluster.command(tight, 'INFO', 'memory'))?.[1]);
    await cluster.command(tight, 'CONFIG', 'SET', 'maxmemory', String(Math.floor(used * 1.5)));
    try {
      const figures = await reads.storeFigures();
      const ports = await cluster.masterPorts();
      const sizes = await Promise.all(ports.map(async (port) => Number(await cluster.command(port, 'DBSIZE'))));
      expect(figures.masters?.map((master) => Number(master.node.split(':')[1])).sort()).toEqual([...ports].sort());
      expect(figures.keys).toBe(sizes.reduce((total, size) => total + size, 0));
      expect(figures.keys).toBeGreaterThan(0);
      expect(figures.usedMemoryBytes).toBe(figures.masters?.reduce((total, master) => total + master.usedMemoryBytes, 0));
      expect(figures.maxmemoryBytes).toBe(Math.floor(used * 1.5));
      expect(figures.policy).toBe('noeviction');
      expect(figures.evictedKeys).toBe(0);
      expect(figures.tightestMaster?.node).toBe(`127.0.0.1:${tight}`);
    } finally {
      await cluster.command(tight, 'CONFIG', 'SET', 'maxmemory', '0');
    }
  });

  it("connects to every node as the user of the nodes' URL, not only to the one it discovered the cluster through", async () => {
    const { cluster } = live();
    const password = randomBytes(12).toString('hex');
    for (const node of cluster.nodes) {
      await cluster.command(node.port, 'ACL', 'SETUSER', 'retrysafe_reader', 'on', `>${password}`, 'resetkeys', '~retrysafe:*', '-@all', '+hmget', '+acl|whoami', '+cluster|slots', '+info', '+time');
    }
    const [first] = cluster.nodes;
    const reader = await connectRedisCluster([{ url: `redis://retrysafe_reader:${password}@127.0.0.1:${first?.port}` }]);
    try {
      const masters = (await reader.commands.eachMaster?.()) ?? [];
      expect(masters).toHaveLength(3);
      const users = await Promise.all(masters.map(async (master) => String(await master.commands.sendCommand(['ACL', 'WHOAMI']))));
      expect(users).toEqual(['retrysafe_reader', 'retrysafe_reader', 'retrysafe_reader']);
      // A command routed by key goes through the same clients: this user may not write.
      await expect(reader.commands.sendCommand(['HSET', 'retrysafe:{x:y}:k', 'state', 'x'])).rejects.toThrow(/^NOPERM/);
    } finally {
      await reader.close();
    }
  });

  it('says the correlation-id lookup is not kept for a Redis Cluster, never "not found"', async () => {
    const { connection } = live();
    const reads = new RedisKeyReads(connection.commands, db.pool);
    const refusal = await reads.correlationRecords(randomUUID()).then(() => null, (error: unknown) => error);
    expect(refusal).toBeInstanceOf(KeyReadUnsupportedError);
    expect((refusal as Error).message).toBe(CLUSTER_CORRELATION_NOT_KEPT);
    expect(CLUSTER_CORRELATION_NOT_KEPT).toMatch(/^not kept for a Redis Cluster: /);
  });
});
