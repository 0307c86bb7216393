// A Redis Cluster (three masters, a replica each) loses a master to SIGKILL while eight callers
// send new keys and retries of earlier ones through the Fetch adapter, each request's work
// counting its effect in a ledger. What must hold: every answer while the slot moves is a 503
// with Retry-After (or a 409 with it), never a 500; the killed master's keys are served again
// once its replica is promoted (the recovery time is printed); and no work runs twice for a key
// whose claim was acknowledged (its work started): the lease (two minutes) outlasts the test, so
// any second run of a key means Redis lost a claim or a completion. Replication is asynchronous,
// so without WAIT a claim acknowledged just before the kill may be lost with the master: such
// second runs are allowed only for keys of the killed master's slots (and counted); on the other
// masters there are none. With waitReplicas: 1 a claim runs only once its replica has it: none;
// there the promoted replica, having no replica of its own, answers 503 until the killed node
// rejoins as its replica, so the recovery time includes that restart.
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRetrysafe } from '@retrysafe/store';
import { idempotent } from '@retrysafe/store/fetch';
import { recordKey } from '@retrysafe/store/redis';
import { useTestDatabase } from '../helpers/database';
import { hasRedis } from '../helpers/redis';
import { startRedisCluster, type TestRedisCluster } from '../helpers/redis-cluster';
import { jsonResult, sleep, testPolicy } from '../helpers/store';

const ENDPOINT = 'POST /orders';
const SERVICE = 'orders-cluster';
const CALLERS = 8;
const PRINCIPALS = 12;

interface Run {
  key: string;
  startedAt: number;
}

interface Summary {
  statuses: Map<number, number>;
  /** Answers other than 201, 409 and 503, or a 409/503 without Retry-After. */
  unexpected: string[];
  /** 503s of requests sent after the kill. */
  unavailableAfterKill: number;
  /** ms from the kill to the first new key of the killed master's slots answered 201. */
  recoveryMs: number;
  /** Keys whose work ran more than once, by where they live. */
  duplicatesOnKilledMaster: string[];
  duplicatesElsewhere: string[];
  acknowledged: number;
  shortfalls: string[];
}

/** Waits until the victim's slots have a new master, then starts the victim again. */
async function promotedThenRestart(cluster: TestRedisCluster, victim: number, deadline: number): Promise<void> {
  for (;;) {
    const masters = await cluster.masterPorts().catch((): number[] => []);
    if (masters.length === 3 && !masters.includes(victim)) break;
    if (performance.now() > deadline) throw new Error('no replica took over the killed master within the deadline');
    await sleep(100);
  }
  await cluster.restart(victim);
}

describe.runIf(hasRedis)('a Redis Cluster losing a master under load', () => {
  const db = useTestDatabase();
  let cluster: TestRedisCluster | undefined;
  beforeAll(async () => {
    // A failover 3 s after a master falls silent (cluster-node-timeout).
    cluster = await startRedisCluster([], { nodeTimeoutMs: 3_000 });
    if (process.env.REDIS_FAILOVER_TRACE) cluster.monitor(process.env.REDIS_FAILOVER_TRACE);
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  async function failover(waitReplicas: number): Promise<Summary> {
    if (!cluster) throw new Error('no cluster');
    const live = cluster;
    const errors: string[] = [];
    const retrysafe = await createRetrysafe({
      connectionString: db.url,
      service: SERVICE,
      fingerprintSecret: randomBytes(32),
      responseKeys: `k1:${randomBytes(32).toString('base64')}`,
      metricsFlushIntervalMs: 3_600_000,
      redis: { cluster: { nodes: live.rootNodes.filter((_, index) => live.nodes[index]?.alive) }, waitReplicas, waitTimeoutMs: 1_000 },
      onError: (error, context) => errors.push(`${context.task}: ${error instanceof Error ? error.message : String(error)}`),
    });
    try {
      const principals = Array.from({ length: PRINCIPALS }, () => randomUUID());
      const masterOf = new Map<string, number>();
      for (const principalId of principals) masterOf.set(principalId, await live.masterOf(recordKey({ principalId, service: SERVICE, scope: ENDPOINT, key: 'x' })));
      // The master of the first principal's slot dies; at least one principal lives elsewhere.
      const victim = masterOf.get(principals[0] ?? '') ?? 0;
      expect(principals.some((principalId) => masterOf.get(principalId) !== victim)).toBe(true);

      const runs = new Map<string, Run[]>();
      // Per key: each request (sent..answered relative to the kill, status, correlation id) and each run of its work, printed for a key run twice.
      const trace = new Map<string, string[]>();
      const since = (at: number) => (clock.killedAt === null ? `${Math.round(at)}` : `kill${at >= clock.killedAt ? '+' : ''}${Math.round(at - clock.killedAt)}`);
      const unexpected: string[] = [];
      const handler = idempotent(retrysafe.store, {
        endpoint: ENDPOINT,
        method: 'POST',
        mode: 'claim-first',
        policy: { ...testPolicy, leaseMs: 120_000 },
        maxBodyBytes: 1_024,
        input: { safeParse: (value: unknown) => ({ success: true as const, data: value }) },
        authenticate: (request: Request) => ({ principalId: request.headers.get('authorization') ?? '' }),
        // What the adapter answers 500: named in the failure.
        onError: (error) => unexpected.push(`500 for ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`),
        work: (_input, principal, context, request) => {
          const id = `${principal.principalId}/${request.headers.get('idempotency-key') ?? ''}`;
          const list = runs.get(id) ?? [];
          list.push({ key: id, startedAt: performance.now() });
          const lines = trace.get(id) ?? [];
          lines.push(`${since(performance.now())} work ran (cid ${context.correlationId})`);
          trace.set(id, lines);
          runs.set(id, list);
          return Promise.resolve(jsonResult(201, { id }));
        },
      });
      const statuses = new Map<number, number>();
      const sent: { principalId: string; key: string }[] = [];
      let acknowledged = 0;
      let unavailableAfterKill = 0;
      // Set by the load and by the kill, read by both (an object: closures write it).
      const clock: { killedAt: number | null; recoveredAt: number | null } = { killedAt: null, recoveredAt: null };
      const send = async (principalId: string, key: string): Promise<number> => {
        const sentAt = performance.now();
        const response = await handler(
          new Request('http://test/orders', {
            method: 'POST',
            headers: { authorization: principalId, 'idempotency-key': key, 'content-type': 'application/json' },
            body: JSON.stringify({ sku: 'a', quantity: 1 }),
          }),
        );
        await response.arrayBuffer();
        const id = `${principalId}/${key}`;
        const lines = trace.get(id) ?? [];
        lines.push(`${since(sentAt)}..${since(performance.now())} ${response.status} cid=${response.headers.get('x-correlation-id') ?? ''}${response.headers.get('idempotent-replayed') ? ' replayed' : ''}`);
        trace.set(id, lines);
        statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
        if (![201, 409, 503].includes(response.status)) unexpected.push(`${response.status} ${principalId}/${key}`);
        if ((response.status === 409 || response.status === 503) && !response.headers.get('retry-after')) unexpected.push(`${response.status} without Retry-After`);
        if (response.status === 503 && clock.killedAt !== null && sentAt > clock.killedAt) unavailableAfterKill += 1;
        if (response.status === 201) {
          acknowledged += 1;
          const fresh = response.headers.get('idempotent-replayed') === null;
          if (fresh && clock.killedAt !== null && clock.recoveredAt === null && sentAt > clock.killedAt && masterOf.get(principalId) === victim) clock.recoveredAt = performance.now();
        }
        return response.status;
      };

      let counter = 0;
      let stopAt = Number.POSITIVE_INFINITY;
      const caller = async (index: number) => {
        while (performance.now() < stopAt) {
          const retry = sent.length > 0 && (counter + index) % 3 === 0;
          const target = retry ? sent[(counter * 7919) % sent.length] : { principalId: principals[counter % PRINCIPALS] ?? '', key: `k-${counter}` };
          counter += 1;
          if (!target) continue;
          if (!retry) sent.push(target);
          const status = await send(target.principalId, target.key);
          // A caller that was told to wait does, briefly (the machine is shared; the slot moves in seconds).
          if (status === 503) await sleep(50);
        }
      };
      const callers = Array.from({ length: CALLERS }, (_, index) => caller(index));
      // Load first, then the kill, then load until the victim's keys are served again, and a second more.
      const deadline = performance.now() + 120_000;
      while (acknowledged < 200 && performance.now() < deadline) await sleep(20);
      const killedAt = performance.now();
      clock.killedAt = killedAt;
      await live.kill(victim, 'SIGKILL');
      // With WAIT the promoted replica, a master without a replica, refuses every claim (503) until
      // one is attached: the killed node is started again once its replica has taken over, and
      // rejoins as that replica's replica (the operator's part of the recovery).
      const rejoined = waitReplicas > 0 ? promotedThenRestart(live, victim, deadline) : Promise.resolve();
      while (clock.recoveredAt === null && performance.now() < deadline) await sleep(50);
      await rejoined;
      stopAt = performance.now() + 1_000;
      await Promise.all(callers);
      const recoveredAt = clock.recoveredAt;
      if (recoveredAt === null) throw new Error(`the killed master's keys were not served again within the deadline; answers ${JSON.stringify([...statuses])}; errors ${errors.slice(0, 5).join(' | ')}`);
      const recoveryMs = recoveredAt - killedAt;

      // Every key once more: a record Redis lost runs its work again here.
      await live.waitUntilOk({ timeoutMs: 60_000 });
      for (let index = 0; index < sent.length; index += CALLERS) {
        await Promise.all(sent.slice(index, index + CALLERS).map(async ({ principalId, key }) => {
          const until = performance.now() + 30_000;
          while ((await send(principalId, key)) === 503 && performance.now() < until) await sleep(100);
        }));
      }
      const duplicated = [...runs.values()].filter((list) => list.length > 1).map((list) => list[0]?.key ?? '');
      for (const id of duplicated) {
        const [principalId = '', key = ''] = id.split('/');
        const name = recordKey({ principalId, service: SERVICE, scope: ENDPOINT, key });
        const record = await live.command(await live.masterOf(name), 'HGETALL', name).catch(() => '');
        process.stdout.write(`ran twice: ${id} (killed master ${victim}; its master now ${await live.masterOf(name).catch(() => 0)})\n  ${(trace.get(id) ?? []).join('\n  ')}\n  record now: ${record.replace(/\n/g, ' ').slice(0, 400)}\n`);
      }
      if (process.env.REDIS_FAILOVER_TRACE) {
        for (const node of live.nodes.filter((candidate) => candidate.alive)) {
          const stats = `${await live.command(node.port, 'INFO', 'commandstats')}${await live.command(node.port, 'INFO', 'errorstats')}`;
          process.stdout.write(`node ${node.port}${node.port === victim ? ' (killed, restarted)' : ''}: ${stats.split('\n').filter((line) => /cmdstat_(eval|evalsha|wait):|errorstat/.test(line)).join(' ')}\n`);
        }
      }
      if (duplicated.length > 0 || process.env.REDIS_FAILOVER_TRACE) process.stdout.write(`onError (${errors.length}): ${[...new Set(errors.map((error) => error.slice(0, 160)))].slice(0, 20).join(' | ')}\n`);
      const onVictim = (id: string) => masterOf.get(id.split('/')[0] ?? '') === victim;
      // The killed node comes back as its replica's replica, so the next run finds three masters with a replica each.
      if (waitReplicas === 0) await live.restart(victim);
      await live.waitUntilOk({ timeoutMs: 60_000 });
      return {
        statuses,
        unexpected,
        unavailableAfterKill,
        recoveryMs,
        duplicatesOnKilledMaster: duplicated.filter(onVictim),
        duplicatesElsewhere: duplicated.filter((id) => !onVictim(id)),
        acknowledged,
        shortfalls: errors.filter((error) => error.startsWith('redis replication')),
      };
    } finally {
      await retrysafe.stop();
    }
  }

  const report = (label: string, summary: Summary) => {
    process.stdout.write(
      `Redis Cluster failover (${label}): recovery ${(summary.recoveryMs / 1000).toFixed(2)} s from SIGKILL to the first new key served on the promoted replica; ` +
        `answers ${JSON.stringify(Object.fromEntries(summary.statuses))}, 503 after the kill ${summary.unavailableAfterKill}, ` +
        `keys run twice: ${summary.duplicatesOnKilledMaster.length} on the killed master, ${summary.duplicatesElsewhere.length} elsewhere; WAIT shortfalls ${summary.shortfalls.length}\n`,
    );
  };

  it('without WAIT: 503 with Retry-After while the slot moves, recovery, and no second run outside the killed master', async () => {
    const summary = await failover(0);
    report('no WAIT', summary);
    expect(summary.unexpected).toEqual([]);
    expect(summary.unavailableAfterKill).toBeGreaterThan(0);
    expect(summary.duplicatesElsewhere).toEqual([]);
  }, 300_000);

  // Issue 27 point 6. Earlier, 2 of 7 runs on a loaded CI machine saw a 500 ('Disconnects client':
  // the cluster client destroying the failed master's connection, now a 503) and two keys run twice,
  // whose trace was not kept. A key run twice now prints its requests (answers, correlation ids,
  // when the work ran) and its record; REDIS_FAILOVER_TRACE=<dir> adds every node's MONITOR and
  // its script and WAIT counters. redis-cluster-stale-master.test.ts has the stalled-master case.
  it('with waitReplicas: 1, no acknowledged claim runs twice, on any master', async () => {
    const summary = await failover(1);
    report('waitReplicas 1', summary);
    expect(summary.unexpected).toEqual([]);
    expect(summary.unavailableAfterKill).toBeGreaterThan(0);
    expect([...summary.duplicatesOnKilledMaster, ...summary.duplicatesElsewhere]).toEqual([]);
  }, 300_000);
});
