// A master that stalls (SIGSTOP: a paused VM, a swapped-out process) past cluster-node-timeout
// while a claim waits in its socket, with waitReplicas: 1 and two replicas a master. One replica is
// promoted, the other follows it, and a second instance claims the key on the new master (its
// replica acknowledges) and runs the work. Then the stalled master wakes: still believing it masters
// the slot, it runs the queued claim on its stale data, where the key is new (attempt 1, as the
// running claim on the new master). WAIT is what keeps that claim's work from running: the node
// turns replica, the blocked WAIT is refused (UNBLOCKED), the request is answered 503 with
// Retry-After. Redis closes that connection, so the stale claim's failure mark is lost with it; had
// the client delivered it to the new master (the slot moved between the claim and the mark), the
// fence by the claim's correlation id (redis-fencing.test.ts) keeps it from failing the running
// claim there. What must hold: the work runs once, its completion is recorded on the new master,
// and a retry is a replay.
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRetrysafe, type Retrysafe } from '@retrysafe/store';
import { idempotent } from '@retrysafe/store/fetch';
import { recordKey } from '@retrysafe/store/redis';
import { useTestDatabase } from '../helpers/database';
import { hasRedis } from '../helpers/redis';
import { startRedisCluster, type TestRedisCluster } from '../helpers/redis-cluster';
import { jsonResult, sleep, testPolicy } from '../helpers/store';

const ENDPOINT = 'POST /orders';
const SERVICE = 'orders-stale-master';

describe.runIf(hasRedis)('a Redis master that stalls past the node timeout and wakes after its replica took over (waitReplicas: 1)', () => {
  const db = useTestDatabase();
  let cluster: TestRedisCluster | undefined;
  const instances: Retrysafe[] = [];
  beforeAll(async () => {
    cluster = await startRedisCluster([], { nodeTimeoutMs: 2_000, replicas: 2 });
  }, 120_000);
  let stalled: number | null = null;
  afterAll(async () => {
    // A failure half-way must not leave a node stopped under the instances' connections.
    if (stalled !== null) cluster?.signal(stalled, 'SIGCONT');
    await Promise.allSettled(instances.map((instance) => instance.stop()));
    await cluster?.stop();
  });

  it("the stale master's claim does not fail the new master's: the work runs once, the retry is a replay", async () => {
    if (!cluster) throw new Error('no cluster');
    const live = cluster;
    const secret = randomBytes(32);
    const responseKeys = `k1:${randomBytes(32).toString('base64')}`;
    const errors: string[] = [];
    const instance = async (nodes: { url: string }[]) => {
      const retrysafe = await createRetrysafe({
        connectionString: db.url,
        service: SERVICE,
        fingerprintSecret: secret,
        responseKeys,
        metricsFlushIntervalMs: 3_600_000,
        redis: { cluster: { nodes }, waitReplicas: 1, waitTimeoutMs: 1_000 },
        onError: (error, context) => errors.push(`${context.task}: ${error instanceof Error ? error.message : String(error)}`),
      });
      instances.push(retrysafe);
      return retrysafe;
    };
    const runs: string[] = [];
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const route = (retrysafe: Retrysafe, hold: boolean) =>
      idempotent(retrysafe.store, {
        endpoint: ENDPOINT,
        method: 'POST',
        mode: 'claim-first',
        policy: { ...testPolicy, leaseMs: 120_000 },
        maxBodyBytes: 1_024,
        input: { safeParse: (value: unknown) => ({ success: true as const, data: value }) },
        authenticate: (request: Request) => ({ principalId: request.headers.get('authorization') ?? '' }),
        work: async (_input, principal, _context, request) => {
          runs.push(`${principal.principalId}/${request.headers.get('idempotency-key') ?? ''}`);
          if (hold) await held;
          return jsonResult(201, { ok: true });
        },
      });
    const request = (principalId: string, key: string) =>
      new Request('http://test/orders', {
        method: 'POST',
        headers: { authorization: principalId, 'idempotency-key': key, 'content-type': 'application/json' },
        body: JSON.stringify({ sku: 'a', quantity: 1 }),
      });

    const principalId = randomUUID();
    const key = 'order-1';
    const victim = await live.masterOf(recordKey({ principalId, service: SERVICE, scope: ENDPOINT, key }));
    const first = await instance(live.rootNodes);
    const firstRoute = route(first, false);
    // The principal's slot (its hash tag) has had a claim: the master has the claim script cached,
    // so the queued claim runs as EVALSHA the moment the master wakes.
    expect((await firstRoute(request(principalId, 'warm-up'))).status).toBe(201);

    stalled = victim;
    live.signal(victim, 'SIGSTOP');
    const stale = firstRoute(request(principalId, key));
    // A replica is promoted; the other one follows it (the new master has a replica to acknowledge WAIT).
    const deadline = performance.now() + 60_000;
    let promoted = 0;
    for (;;) {
      const masters = await live.masterPorts().catch((): number[] => []);
      promoted = masters.length === 3 && !masters.includes(victim) ? await live.masterOf(recordKey({ principalId, service: SERVICE, scope: ENDPOINT, key })).catch(() => 0) : 0;
      if (promoted !== 0 && /connected_slaves:1[\s\S]*state=online/.test(await live.command(promoted, 'INFO', 'replication'))) break;
      if (performance.now() > deadline) throw new Error('no replica of the stalled master was promoted with a replica of its own');
      await sleep(100);
    }

    // A second instance, started now, finds the new master; its claim is acknowledged there and its work starts.
    const second = await instance(live.rootNodes.filter((node) => !node.url.endsWith(`:${victim}`)));
    const secondRoute = route(second, true);
    const running = secondRoute(request(principalId, key));
    while (runs.filter((id) => id.endsWith(`/${key}`)).length === 0 && performance.now() < deadline) await sleep(20);
    expect(runs.filter((id) => id.endsWith(`/${key}`))).toHaveLength(1);

    // The stalled master wakes and runs the queued claim on its stale data: new, then refused (503).
    live.signal(victim, 'SIGCONT');
    stalled = null;
    const staleAnswer = await stale;
    expect(staleAnswer.status).toBe(503);
    expect(staleAnswer.headers.get('retry-after')).not.toBeNull();
    expect(errors.some((error) => error.includes('replicas acknowledged a claim'))).toBe(true);

    // The stale master did run the claim (a script call after the warm-up's), and its WAIT was refused by the demotion.
    const stats = `${await live.command(victim, 'INFO', 'commandstats')}${await live.command(victim, 'INFO', 'errorstats')}`;
    expect(Number(/errorstat_UNBLOCKED:count=(\d+)/.exec(stats)?.[1] ?? 0)).toBeGreaterThanOrEqual(1);
    release();
    expect((await running).status).toBe(201);
    const record = await live.command(promoted, 'HGET', recordKey({ principalId, service: SERVICE, scope: ENDPOINT, key }), 'state');
    expect(record.trim()).toBe('completed');
    const retry = await secondRoute(request(principalId, key));
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(runs.filter((id) => id.endsWith(`/${key}`))).toHaveLength(1);
  }, 120_000);
});
