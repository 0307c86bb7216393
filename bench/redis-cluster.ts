// `npm run bench -- redis-cluster`: the store (createRetrysafe({ redis: { cluster } }), fingerprints,
// sealing and metrics on) on a Redis Cluster of three masters with a replica each, on loopback,
// without WAIT and with waitReplicas: 1 (WAIT pipelined behind each write), fresh keys and replays,
// at BENCH_REDIS_CLUSTER_CALLERS (default 1,8) callers for BENCH_REDIS_CLUSTER_SECONDS (default 3):
// what acknowledging a claim only once a replica has it costs. Small on purpose (six servers).
import { randomBytes, randomUUID } from 'node:crypto';
import { createRetrysafe } from '@retrysafe/store';
import { startRedisCluster } from '../packages/store/test/helpers/redis-cluster';
import type { BenchDatabase } from './database';
import { BENCH_ENDPOINT, BENCH_SERVICE, benchBody, benchPolicy, benchResponse } from './fixtures';
import { formatRun, runClosedLoopWithCpu, type RunResult } from './measure';

export interface RedisClusterBenchRow {
  waitReplicas: number;
  kind: 'fresh' | 'replay';
  callers: number;
  run: RunResult;
  cpuMicrosPerRequest: number;
}

const SECONDS = Number(process.env.BENCH_REDIS_CLUSTER_SECONDS ?? 3);
const CALLERS = (process.env.BENCH_REDIS_CLUSTER_CALLERS ?? '1,8').split(',').map(Number);
const REPLAY_KEYS = 1_000;
const PRINCIPALS = 12;

export async function benchRedisCluster(database: BenchDatabase, log: (line: string) => void): Promise<RedisClusterBenchRow[]> {
  const cluster = await startRedisCluster();
  const rows: RedisClusterBenchRow[] = [];
  try {
    log(`Redis Cluster: 3 masters, 1 replica each, on 127.0.0.1 (no persistence); ${SECONDS} s per run`);
    // Principals spread the keys over the three masters (each principal's keys share a slot).
    const principals = Array.from({ length: PRINCIPALS }, () => randomUUID());
    for (const waitReplicas of [0, 1]) {
      const retrysafe = await createRetrysafe({
        connectionString: database.url,
        service: BENCH_SERVICE,
        fingerprintSecret: randomBytes(32),
        responseKeys: `k1:${randomBytes(32).toString('base64')}`,
        redis: { cluster: { nodes: cluster.rootNodes }, waitReplicas },
      });
      try {
        const request = (principal: number, key: string) => ({
          principalId: principals[principal % PRINCIPALS] ?? '',
          endpoint: BENCH_ENDPOINT,
          method: 'POST',
          key,
          body: benchBody,
          policy: benchPolicy,
          mode: 'claim-first' as const,
          work: () => Promise.resolve({ status: 201, contentType: 'application/json', body: benchResponse }),
        });
        const replayKey = (i: number) => `replay-${waitReplicas}-${i % REPLAY_KEYS}`;
        for (let i = 0; i < REPLAY_KEYS; i += 1) await retrysafe.store.execute(request(i, replayKey(i)));
        for (const callers of CALLERS) {
          for (const kind of ['fresh', 'replay'] as const) {
            const { run, cpuMicrosPerRequest } = await runClosedLoopWithCpu(
              callers,
              SECONDS * 1000,
              async (worker, iteration) => {
                if (kind === 'fresh') {
                  await retrysafe.store.execute(request(worker + iteration, randomUUID()));
                  return;
                }
                const i = worker * 7_919 + iteration;
                if (!(await retrysafe.store.execute(request(i % REPLAY_KEYS, replayKey(i)))).replayed) throw new Error('expected a replay');
              },
              500,
            );
            rows.push({ waitReplicas, kind, callers, run, cpuMicrosPerRequest });
            log(`${formatRun(`${waitReplicas ? 'WAIT 1' : 'no WAIT'} ${kind}, ${callers} caller(s)`, run)}   ${cpuMicrosPerRequest.toFixed(0).padStart(4)} us CPU/request`);
          }
        }
      } finally {
        await retrysafe.stop();
      }
    }
    for (const callers of CALLERS) {
      for (const kind of ['fresh', 'replay'] as const) {
        const [plain, waited] = [0, 1].map((waitReplicas) => rows.find((row) => row.waitReplicas === waitReplicas && row.kind === kind && row.callers === callers));
        if (plain && waited) log(`  WAIT 1 / no WAIT, ${kind}, ${callers} caller(s): ${(waited.run.perSecond / plain.run.perSecond).toFixed(2)}x throughput, p50 ${(waited.run.p50Ms - plain.run.p50Ms).toFixed(2)} ms more`);
      }
    }
  } finally {
    await cluster.stop();
  }
  return rows;
}
