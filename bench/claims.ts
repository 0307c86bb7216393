// Claims through the store against the same INSERT ... ON CONFLICT DO NOTHING RETURNING
// statement issued raw through pg, at 1, 8 and 32 concurrent clients, in the same run.
//   raw           the store's claim statement, named, on one pg.Client per worker.
//   store new     store.begin() on new keys: fingerprint (HMAC over canonical JSON), the
//                 live-key quota check, the pool, the claim statement, the flow event.
//   store replay  store.begin() on completed keys: the same one statement (it reads the
//                 existing row in the same round trip), plus decryption.
//   bare INSERT   for reference: the INSERT alone, without the folded-in read; the
//                 difference is what answering a replay in one round trip costs a new claim.
// Targets: store new >= 0.85x raw; store replay >= 1.0x store new. Each figure is the
// mean of two alternating rounds, to even out drift on a shared machine.
import { randomBytes, randomUUID } from 'node:crypto';
import { newCorrelationId } from '@retrysafe/store';
import pg from 'pg';
import { LiveKeyQuota } from '@retrysafe/store';
import { ResponseKeyRing } from '@retrysafe/store';
import { storeStatementTexts } from '@retrysafe/store/postgres';
import { IdempotencyStore, type ClaimCall } from '@retrysafe/store';
import { FlowRecorder } from '@retrysafe/store';
import type { BenchDatabase } from './database';
import { BENCH_ENDPOINT, BENCH_SERVICE, benchBody, benchPolicy, benchResponse } from './fixtures';
import { formatRun, meanRun as mean, runClosedLoop, type RunResult } from './measure';

const CONCURRENCY = [1, 8, 32];
const DURATION_MS = Number(process.env.BENCH_SECONDS ?? 3) * 1000;
const ENDPOINT = BENCH_ENDPOINT;
const REPLAY_KEYS_PER_WORKER = 200;

const policy = benchPolicy;

const BARE_INSERT = `INSERT INTO idempotency_keys
  (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
VALUES ($1, $6, $2, $3, 'in_progress', $4, $5, now() + interval '30 seconds', now() + interval '26 hours')
ON CONFLICT (principal_id, service, scope, key) DO NOTHING
RETURNING attempts`;

export interface ClaimsReport {
  concurrency: number;
  bareInsert: RunResult;
  raw: RunResult;
  storeNew: RunResult;
  storeReplay: RunResult;
  storeRecording: RunResult;
  newVsRaw: number;
  recordingVsNew: number;
  replayVsNew: number;
}

export async function benchClaims(database: BenchDatabase, log: (line: string) => void): Promise<ClaimsReport[]> {
  const reports: ClaimsReport[] = [];
  const body = benchBody;
  const response = benchResponse;
  for (const concurrency of CONCURRENCY) {
    const run = randomUUID().slice(0, 8);
    const principals = Array.from({ length: concurrency }, () => randomUUID());

    const clients = await Promise.all(
      Array.from({ length: concurrency }, async () => {
        const client = new pg.Client({ connectionString: database.url });
        await client.connect();
        return client;
      }),
    );
    const rawRun = (text: string, name: string, extra: unknown[]) =>
      runClosedLoop(concurrency, DURATION_MS, async (worker, i) => {
        await clients[worker]?.query({
          name,
          text,
          values: [principals[worker], ENDPOINT, `${name}-${run}-${worker}-${i}-${Math.random()}`, randomBytes(32), newCorrelationId(), ...extra],
        });
      });

    const pool = new pg.Pool({ connectionString: database.url, max: concurrency });
    const quota = new LiveKeyQuota(pool, { service: BENCH_SERVICE });
    quota.start();
    const secrets = { fingerprintSecret: randomBytes(32), keyRing: new ResponseKeyRing([{ id: 'k1', key: randomBytes(32) }]) };
    const store = new IdempotencyStore({ pool, service: BENCH_SERVICE, ...secrets, quota, observer: { record: () => undefined } });
    // The same store reporting to the flow recorder, flushing to the database as in production.
    const recorder = new FlowRecorder(pool, { flushIntervalMs: 1_000 });
    recorder.start();
    const recordingStore = new IdempotencyStore({ pool, service: BENCH_SERVICE, ...secrets, quota, observer: recorder });
    const call = (worker: number, key: string): ClaimCall => ({
      principalId: principals[worker] ?? '',
      endpoint: ENDPOINT,
      method: 'POST',
      key,
      body,
      policy,
    });
    // Warm the pool and each principal's quota entry outside the measurement.
    await Promise.all(principals.map((_, worker) => store.begin(call(worker, `warm-${run}-${worker}`))));
    const storeRun = (target: IdempotencyStore, label: string) =>
      runClosedLoop(concurrency, DURATION_MS, async (worker, i) => {
        const begun = await target.begin(call(worker, `${label}-${run}-${worker}-${i}`));
        if (!begun.claimed) throw new Error('expected a new claim');
      });

    const rounds: { raw: RunResult; storeNew: RunResult; storeRecording: RunResult }[] = [];
    for (let round = 0; round < 2; round += 1) {
      const raw = await rawRun(storeStatementTexts.claim, 'bench_raw_claim', [policy.leaseMs, policy.retentionMs, BENCH_SERVICE]);
      const storeNewRound = await storeRun(store, `new${round}`);
      rounds.push({ raw, storeNew: storeNewRound, storeRecording: await storeRun(recordingStore, `rec${round}`) });
    }
    const raw = mean(rounds.map((round) => round.raw));
    const storeNew = mean(rounds.map((round) => round.storeNew));
    const storeRecording = mean(rounds.map((round) => round.storeRecording));
    await recorder.stop();
    const bareInsert = await rawRun(BARE_INSERT, 'bench_bare_insert', [BENCH_SERVICE]);
    await Promise.all(clients.map((client) => client.end()));

    for (let worker = 0; worker < concurrency; worker += 1) {
      for (let i = 0; i < REPLAY_KEYS_PER_WORKER; i += 1) {
        const begun = await store.begin(call(worker, `replay-${run}-${worker}-${i}`));
        if (begun.claimed) await begun.finish({ status: 201, contentType: 'application/json', body: response });
      }
    }
    const storeReplay = await runClosedLoop(concurrency, DURATION_MS, async (worker, i) => {
      const begun = await store.begin(call(worker, `replay-${run}-${worker}-${i % REPLAY_KEYS_PER_WORKER}`));
      if (begun.claimed || !begun.outcome.replayed) throw new Error('expected a replay');
    });
    await quota.stop();
    await pool.end();

    const report = {
      concurrency,
      bareInsert,
      raw,
      storeNew,
      storeReplay,
      storeRecording,
      newVsRaw: storeNew.perSecond / raw.perSecond,
      replayVsNew: storeReplay.perSecond / storeNew.perSecond,
      recordingVsNew: storeRecording.perSecond / storeNew.perSecond,
    };
    reports.push(report);
    log(`\n${concurrency} concurrent client(s)`);
    log(formatRun('  raw claim statement (pg)', raw));
    log(formatRun('  store, new keys', storeNew));
    log(formatRun('  store, replays', storeReplay));
    log(formatRun('  bare INSERT, for reference', bareInsert));
    log(`  store new / raw:      ${report.newVsRaw.toFixed(2)}x (target >= 0.85x)`);
    log(`  store replay / new:   ${report.replayVsNew.toFixed(2)}x (target >= 1.00x)`);
    log(formatRun('  store, new keys, flow recorded', storeRecording));
    log(`  recording / not:      ${report.recordingVsNew.toFixed(3)}x (target >= 0.98x: recording costs under 2%)`);
  }
  // The recorder's own cost per claim, measured directly (throughput ratios above are
  // within the noise of a shared 2-core machine): record() a million events.
  const idlePool = new pg.Pool({ connectionString: database.url, max: 1 });
  const recorder = new FlowRecorder(idlePool);
  const scopes = ['POST /api/v1/payments', 'POST /api/v1/refunds'];
  const outcomes = ['new', 'replay', 'conflict'] as const;
  const events = 1_000_000;
  const began = process.cpuUsage();
  for (let i = 0; i < events; i += 1) {
    recorder.record({ service: BENCH_SERVICE, scope: scopes[i % 2] ?? '', outcome: outcomes[i % 3] ?? 'new', claimLatencyMs: 0.5 + (i % 100) / 10 });
  }
  const cpu = process.cpuUsage(began);
  const perEventUs = (cpu.user + cpu.system) / events;
  const fastest = Math.max(...reports.map((report) => report.storeNew.perSecond));
  log(`\nflow recorder: ${perEventUs.toFixed(3)} us of CPU per claim recorded; at the fastest measured rate (${fastest.toFixed(0)} claims/s)`);
  log(`  that is ${((perEventUs * fastest) / 1e6 * 100).toFixed(2)}% of one core (target: recording costs under 2% of claim throughput)`);
  await idlePool.end();
  return reports;
}
