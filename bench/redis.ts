// `npm run bench -- redis`: the store with its key records in Redis (createRetrysafe({ redis }), so
// fingerprints, sealing, the flow recorder and the quota are all on), the path a user calls whole
// (claim, a trivial work function, completion), beside the same Lua scripts sent raw through the
// backend (RedisBackend without the store: no fingerprint, no seal, no recorder), and beside two
// peers used as their docs show, each on its own Redis client: Powertools for AWS Lambda
// (TypeScript) idempotency with its CachePersistenceLayer on node-redis (makeIdempotent, key from
// the event, no payload validation, no local cache: its defaults), and node-idempotency (core
// onRequest/onResponse with its Redis storage adapter: SET NX, then GET on a replay; a body hash).
// Same redis-server (its own, on a free loopback port, no persistence), same closed loop, same
// work function and response: fresh UUID keys and replays of pre-created keys, at 1, 8 and 32
// callers, requests per second, Node CPU per request and redis-server CPU per request (on a
// 2-core machine the two share the cores, so both decide the figure; /proc/<pid>/stat, 10 ms
// ticks). Powertools is given the lease as its Lambda context's remaining time (outside Lambda
// it otherwise warns on every call). The store does not reach 1.3x node-idempotency's throughput
// (issue 27): docs/redis.md#speed has the figures and where the time goes. Each cell runs BENCH_REDIS_ROUNDS rounds (default 2) of every side, the order rotated
// each round so every side sees the same machine, and reports their mean and the ratio store /
// node-idempotency. BENCH_REDIS_SECONDS per run (default 3), BENCH_REDIS_CALLERS (default 1,8,32),
// BENCH_REDIS_SIDES (default the four: store,raw,powertools,node-idempotency; raw-unindexed adds
// the raw scripts without the dashboard's indexes of claims in flight and of correlation ids, their
// cost beside raw in the same run).
import { randomBytes, randomUUID } from 'node:crypto';
import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { CachePersistenceLayer } from '@aws-lambda-powertools/idempotency/cache';
import { Idempotency } from '@node-idempotency/core';
import { RedisStorageAdapter } from '@node-idempotency/storage-adapter-redis';
import { createClient } from 'redis';
import { createRetrysafe, newCorrelationId } from '@retrysafe/store';
import { RedisBackend } from '@retrysafe/store/redis';
import { startRedis } from '../packages/store/test/helpers/redis';
import type { BenchDatabase } from './database';
import { BENCH_ENDPOINT, BENCH_SERVICE, benchBody, benchPolicy, benchResponse } from './fixtures';
import { formatRun, meanRun, processCpuUs, runClosedLoopWithCpu, type RunResult } from './measure';

const SIDES = ['store', 'raw', 'raw-unindexed', 'powertools', 'node-idempotency'] as const;
type Side = (typeof SIDES)[number];
const DEFAULT_SIDES: readonly Side[] = ['store', 'raw', 'powertools', 'node-idempotency'];

export interface RedisBenchRow {
  side: Side;
  kind: 'fresh' | 'replay';
  callers: number;
  /** The mean of the rounds. */
  run: RunResult;
  /** Node CPU (user + system) per request over the measured windows, microseconds (mean of the rounds). */
  cpuMicrosPerRequest: number;
  /** redis-server's CPU per request over the same windows, microseconds (10 ms ticks: coarse at low rates). */
  redisCpuMicrosPerRequest: number;
}

const SECONDS = Number(process.env.BENCH_REDIS_SECONDS ?? 3);
const CALLERS = (process.env.BENCH_REDIS_CALLERS ?? '1,8,32').split(',').map(Number);
const ROUNDS = Number(process.env.BENCH_REDIS_ROUNDS ?? 2);
const CHOSEN = (process.env.BENCH_REDIS_SIDES ?? DEFAULT_SIDES.join(',')).split(',').filter((side): side is Side => (SIDES as readonly string[]).includes(side));
const REPLAY_KEYS = 2_000;

/** A closed-loop run with Node's CPU per request and the redis-server's (process `redisPid`) over the same window. */
async function measure(callers: number, redisPid: number, operation: (worker: number, iteration: number) => Promise<void>) {
  let redisFrom = 0;
  let redisUsed = 0;
  const measured = await runClosedLoopWithCpu(callers, SECONDS * 1000, operation, 500, (edge) => {
    if (edge === 'open') redisFrom = processCpuUs(redisPid);
    else redisUsed = processCpuUs(redisPid) - redisFrom;
  });
  return { ...measured, redisCpuMicrosPerRequest: redisUsed / measured.run.operations };
}

interface BenchSide {
  fresh(): Promise<void>;
  replay(key: string): Promise<void>;
  /** Creates the replayed keys. */
  prepare(keys: readonly string[]): Promise<void>;
}

export async function benchRedis(database: BenchDatabase, log: (line: string) => void): Promise<RedisBenchRow[]> {
  const redis = await startRedis();
  const retrysafe = await createRetrysafe({
    connectionString: database.url,
    service: BENCH_SERVICE,
    fingerprintSecret: randomBytes(32),
    responseKeys: `k1:${randomBytes(32).toString('base64')}`,
    redis: { url: redis.url },
  });
  // Each peer on the client its docs show: Powertools is handed a connected node-redis client,
  // node-idempotency's adapter opens its own (node-redis 4, its dependency).
  const powertoolsClient = await createClient({ url: redis.url }).connect();
  const nodeIdempotencyStorage = new RedisStorageAdapter({ url: redis.url });
  await nodeIdempotencyStorage.connect();
  const rows: RedisBenchRow[] = [];
  try {
    const version = ((await redis.command('INFO', 'server')) as Buffer).toString().match(/redis_version:(\S+)/)?.[1] ?? '?';
    const redisPid = Number(((await redis.command('INFO', 'server')) as Buffer).toString().match(/process_id:(\d+)/)?.[1]);
    log(`redis-server ${version} on 127.0.0.1:${redis.port} (no persistence); ${SECONDS} s per run, ${ROUNDS} round(s) per cell, sides in rotated order`);
    const responseJson = JSON.parse(benchResponse.toString('utf8')) as Record<string, unknown>;
    // The work every side runs: counted, so a replay is seen not to run it.
    let workRuns = 0;
    const work = () => {
      workRuns += 1;
      return Promise.resolve({ status: 201, contentType: 'application/json', body: benchResponse });
    };

    const store = retrysafe.store;
    const principalId = randomUUID();
    const request = (key: string) => ({ principalId, endpoint: BENCH_ENDPOINT, method: 'POST', key, body: benchBody, policy: benchPolicy, mode: 'claim-first' as const, work });

    const raw = new RedisBackend(redis.connection.commands);
    // The same scripts without the dashboard's indexes (in flight, correlation id), as on a cluster.
    const unindexed = new RedisBackend(redis.connection.commands, { dashboardIndexes: false });
    const fingerprint = randomBytes(32);
    const rawClaim = (key: string) => ({ principalId, service: BENCH_SERVICE, scope: BENCH_ENDPOINT, key, fingerprint, correlationId: newCorrelationId(), leaseMs: benchPolicy.leaseMs, retentionMs: benchPolicy.retentionMs });
    const sealedLike = randomBytes(benchResponse.length + 28);
    const completeRaw = async (key: string, backend = raw) => {
      const claim = rawClaim(key);
      const claimed = await backend.claim(claim);
      if (!claimed.claimed) throw new Error('expected a new key');
      await work();
      await backend.complete({ ...claim, attempts: 1, status: 201, contentType: 'application/json', body: sealedLike, keyId: 'k1', size: benchResponse.length, reference: null });
    };

    // Powertools: the idempotency key from the event (eventKeyJmesPath), the lease as the
    // "remaining time" its docs take from the Lambda context (registerLambdaContext).
    const powertoolsConfig = new IdempotencyConfig({ eventKeyJmesPath: 'key', expiresAfterSeconds: Math.round(benchPolicy.retentionMs / 1000) });
    powertoolsConfig.registerLambdaContext({ getRemainingTimeInMillis: () => benchPolicy.leaseMs } as Parameters<IdempotencyConfig['registerLambdaContext']>[0]);
    const powertools = makeIdempotent(
      // The event is what Powertools hashes (its `key`); the work does not read it.
      async (_event: { key: string; body: typeof benchBody }) => {
        const result = await work();
        return { status: result.status, contentType: result.contentType, body: responseJson };
      },
      { persistenceStore: new CachePersistenceLayer({ client: powertoolsClient }), config: powertoolsConfig },
    );

    const nodeIdempotency = new Idempotency(nodeIdempotencyStorage, { cacheTTLMS: benchPolicy.retentionMs });
    const nodeIdempotencyRequest = (key: string) => ({ method: 'POST', path: BENCH_ENDPOINT, headers: { 'idempotency-key': key }, body: benchBody });
    const nodeIdempotencyCall = async (key: string): Promise<boolean> => {
      const req = nodeIdempotencyRequest(key);
      const cached = await nodeIdempotency.onRequest(req);
      if (cached) return true;
      const result = await work();
      await nodeIdempotency.onResponse(req, { body: responseJson, additional: { status: result.status } });
      return false;
    };

    const sides: Record<Side, BenchSide> = {
      store: {
        fresh: async () => {
          await store.execute(request(randomUUID()));
        },
        replay: async (key) => {
          if (!(await store.execute(request(key))).replayed) throw new Error('expected a replay');
        },
        prepare: async (keys) => {
          for (const key of keys) await store.execute(request(key));
        },
      },
      raw: {
        fresh: () => completeRaw(randomUUID()),
        replay: async (key) => {
          if ((await raw.claim(rawClaim(key))).claimed) throw new Error('expected an existing key');
        },
        prepare: async (keys) => {
          for (const key of keys) await completeRaw(key);
        },
      },
      'raw-unindexed': {
        fresh: () => completeRaw(randomUUID(), unindexed),
        replay: async (key) => {
          if ((await unindexed.claim(rawClaim(key))).claimed) throw new Error('expected an existing key');
        },
        prepare: async (keys) => {
          for (const key of keys) await completeRaw(key, unindexed);
        },
      },
      powertools: {
        fresh: async () => {
          await powertools({ key: randomUUID(), body: benchBody });
        },
        replay: async (key) => {
          await powertools({ key, body: benchBody });
        },
        prepare: async (keys) => {
          for (const key of keys) await powertools({ key, body: benchBody });
        },
      },
      'node-idempotency': {
        fresh: async () => {
          await nodeIdempotencyCall(randomUUID());
        },
        replay: async (key) => {
          if (!(await nodeIdempotencyCall(key))) throw new Error('expected a replay');
        },
        prepare: async (keys) => {
          for (const key of keys) await nodeIdempotencyCall(key);
        },
      },
    };
    const replayKey = (side: Side, i: number) => `${side}-replay-${i % REPLAY_KEYS}`;
    for (const side of CHOSEN) {
      await sides[side].prepare(Array.from({ length: REPLAY_KEYS }, (_, i) => replayKey(side, i)));
      // A replay must not run the work again (Powertools answers a replay without saying so).
      const before = workRuns;
      await sides[side].replay(replayKey(side, 0));
      if (workRuns !== before) throw new Error(`${side}: a replay ran the work`);
    }

    for (const callers of CALLERS) {
      for (const kind of ['fresh', 'replay'] as const) {
        const samples = new Map<Side, { runs: RunResult[]; cpu: number[]; redisCpu: number[] }>(CHOSEN.map((side) => [side, { runs: [], cpu: [], redisCpu: [] }]));
        for (let round = 0; round < ROUNDS; round += 1) {
          const order = CHOSEN.map((_, i) => CHOSEN[(i + round) % CHOSEN.length] as Side);
          for (const side of order) {
            const operations = sides[side];
            const { run, cpuMicrosPerRequest, redisCpuMicrosPerRequest } = await measure(callers, redisPid, kind === 'fresh' ? () => operations.fresh() : (worker, iteration) => operations.replay(replayKey(side, worker * 7_919 + iteration)));
            samples.get(side)?.runs.push(run);
            samples.get(side)?.cpu.push(cpuMicrosPerRequest);
            samples.get(side)?.redisCpu.push(redisCpuMicrosPerRequest);
          }
        }
        const cell = new Map<Side, RedisBenchRow>();
        for (const [side, { runs, cpu, redisCpu }] of samples) {
          const row: RedisBenchRow = { side, kind, callers, run: meanRun(runs), cpuMicrosPerRequest: mean(cpu), redisCpuMicrosPerRequest: mean(redisCpu) };
          rows.push(row);
          cell.set(side, row);
          log(`${formatRun(`${side} ${kind}, ${callers} caller(s)`, row.run)}   ${row.cpuMicrosPerRequest.toFixed(0).padStart(4)} us Node CPU/request, ${row.redisCpuMicrosPerRequest.toFixed(0).padStart(3)} us Redis`);
        }
        const ours = cell.get('store');
        const peer = cell.get('node-idempotency');
        if (ours && peer) log(`  ratio store / node-idempotency: ${(ours.run.perSecond / peer.run.perSecond).toFixed(2)}x throughput, CPU/request ${ours.cpuMicrosPerRequest.toFixed(0)} vs ${peer.cpuMicrosPerRequest.toFixed(0)} us`);
      }
    }
    log(table(rows));
  } finally {
    await nodeIdempotencyStorage.disconnect();
    await powertoolsClient.close();
    await retrysafe.stop();
    await redis.stop();
  }
  return rows;
}

const mean = (values: readonly number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;

/** The summary: req/s and Node CPU per request per side, and store / node-idempotency, per cell. */
function table(rows: readonly RedisBenchRow[]): string {
  const sides = SIDES.filter((side) => rows.some((row) => row.side === side));
  const cell = (row: RedisBenchRow | undefined) => (row ? `${row.run.perSecond.toFixed(0)} /s, ${row.cpuMicrosPerRequest.toFixed(0)} us (Redis ${row.redisCpuMicrosPerRequest.toFixed(0)})` : '-');
  const lines = [`| kind | callers | ${sides.join(' | ')} | store / node-idempotency |`, `|---|---:|${sides.map(() => '---:|').join('')}---:|`];
  for (const callers of CALLERS) {
    for (const kind of ['fresh', 'replay'] as const) {
      const find = (side: Side) => rows.find((row) => row.side === side && row.kind === kind && row.callers === callers);
      const ours = find('store');
      const peer = find('node-idempotency');
      const ratio = ours && peer ? `${(ours.run.perSecond / peer.run.perSecond).toFixed(2)}x` : '-';
      lines.push(`| ${kind} | ${callers} | ${sides.map((side) => cell(find(side))).join(' | ')} | ${ratio} |`);
    }
  }
  return `\nreq/s, Node CPU per request (and redis-server's), mean of ${ROUNDS} round(s):\n${lines.join('\n')}`;
}
