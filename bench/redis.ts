// `npm run bench -- redis`: the store with its key records in Redis (createRetrysafe({ redis }), so
// fingerprints, sealing, the flow recorder and the quota are all on), the path a user calls whole
// (claim, a trivial work function, completion), beside the same Lua scripts sent raw through the
// backend (RedisBackend without the store: no fingerprint, no seal, no recorder): fresh UUID keys
// and replays of pre-created keys, at 1, 8 and 32 callers, requests per second and Node CPU per
// request (which decides the figure on a 2-core machine). A redis-server of its own on a free
// loopback port (no persistence). BENCH_REDIS_SECONDS per run (default 3), BENCH_REDIS_CALLERS
// (default 1,8,32). The peers (Powertools, node-idempotency) are not in this harness yet (issue 27).
import { randomBytes, randomUUID } from 'node:crypto';
import { createRetrysafe, newCorrelationId } from '@retrysafe/store';
import { RedisBackend } from '@retrysafe/store/redis';
import { startRedis } from '../test/helpers/redis';
import type { BenchDatabase } from './database';
import { BENCH_ENDPOINT, BENCH_SERVICE, benchBody, benchPolicy, benchResponse } from './fixtures';
import { formatRun, runClosedLoopWithCpu, type RunResult } from './measure';

export interface RedisBenchRow {
  side: 'store' | 'raw';
  kind: 'fresh' | 'replay';
  callers: number;
  run: RunResult;
  /** Node CPU (user + system) per request over the measured window, microseconds. */
  cpuMicrosPerRequest: number;
}

const SECONDS = Number(process.env.BENCH_REDIS_SECONDS ?? 3);
const CALLERS = (process.env.BENCH_REDIS_CALLERS ?? '1,8,32').split(',').map(Number);
const REPLAY_KEYS = 2_000;

const measure = (callers: number, operation: (worker: number, iteration: number) => Promise<void>) => runClosedLoopWithCpu(callers, SECONDS * 1000, operation, 500);

export async function benchRedis(database: BenchDatabase, log: (line: string) => void): Promise<RedisBenchRow[]> {
  const redis = await startRedis();
  const retrysafe = await createRetrysafe({
    connectionString: database.url,
    service: BENCH_SERVICE,
    fingerprintSecret: randomBytes(32),
    responseKeys: `k1:${randomBytes(32).toString('base64')}`,
    redis: { url: redis.url },
  });
  const rows: RedisBenchRow[] = [];
  try {
    const version = ((await redis.command('INFO', 'server')) as Buffer).toString().match(/redis_version:(\S+)/)?.[1] ?? '?';
    log(`redis-server ${version} on 127.0.0.1:${redis.port} (no persistence), node-redis; ${SECONDS} s per run`);
    const store = retrysafe.store;
    const raw = new RedisBackend(redis.connection.commands);
    const principalId = randomUUID();
    const request = (key: string) => ({
      principalId,
      endpoint: BENCH_ENDPOINT,
      method: 'POST',
      key,
      body: benchBody,
      policy: benchPolicy,
      mode: 'claim-first' as const,
      work: () => Promise.resolve({ status: 201, contentType: 'application/json', body: benchResponse }),
    });
    const fingerprint = randomBytes(32);
    const rawClaim = (key: string) => ({ principalId, service: BENCH_SERVICE, scope: BENCH_ENDPOINT, key, fingerprint, correlationId: newCorrelationId(), leaseMs: benchPolicy.leaseMs, retentionMs: benchPolicy.retentionMs });
    const sealedLike = randomBytes(benchResponse.length + 28);
    const completeRaw = async (key: string) => {
      const claim = rawClaim(key);
      const claimed = await raw.claim(claim);
      if (!claimed.claimed) throw new Error('expected a new key');
      await raw.complete({ ...claim, attempts: 1, status: 201, contentType: 'application/json', body: sealedLike, keyId: 'k1', size: benchResponse.length, reference: null });
    };
    const sides = {
      store: {
        fresh: async () => {
          await store.execute(request(randomUUID()));
        },
        replayKey: (i: number) => `replay-${i % REPLAY_KEYS}`,
        replay: async (key: string) => {
          if (!(await store.execute(request(key))).replayed) throw new Error('expected a replay');
        },
      },
      raw: {
        fresh: () => completeRaw(randomUUID()),
        replayKey: (i: number) => `raw-replay-${i % REPLAY_KEYS}`,
        replay: async (key: string) => {
          if ((await raw.claim(rawClaim(key))).claimed) throw new Error('expected an existing key');
        },
      },
    };
    for (let i = 0; i < REPLAY_KEYS; i += 1) {
      await store.execute(request(sides.store.replayKey(i)));
      await completeRaw(sides.raw.replayKey(i));
    }
    for (const callers of CALLERS) {
      for (const kind of ['fresh', 'replay'] as const) {
        const measured: Partial<Record<'store' | 'raw', RedisBenchRow>> = {};
        // The raw scripts first, then the store, in one run on the same server.
        for (const side of ['raw', 'store'] as const) {
          const operations = sides[side];
          const { run, cpuMicrosPerRequest } = await measure(callers, kind === 'fresh' ? () => operations.fresh() : (worker, iteration) => operations.replay(operations.replayKey(worker * 7_919 + iteration)));
          const row: RedisBenchRow = { side, kind, callers, run, cpuMicrosPerRequest };
          rows.push(row);
          measured[side] = row;
          log(`${formatRun(`${side} ${kind}, ${callers} caller(s)`, run)}   ${cpuMicrosPerRequest.toFixed(0).padStart(4)} us CPU/request`);
        }
        const { store: ours, raw: baseline } = measured;
        if (ours && baseline) {
          log(`  ratio store / raw scripts: ${(ours.run.perSecond / baseline.run.perSecond).toFixed(2)}x throughput, +${(ours.cpuMicrosPerRequest - baseline.cpuMicrosPerRequest).toFixed(0)} us CPU/request`);
        }
      }
    }
  } finally {
    await retrysafe.stop();
    await redis.stop();
  }
  return rows;
}
