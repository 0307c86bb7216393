// What the flow recorder costs a claim, and what its principals' top-K adds: the Node CPU of
// FlowRecorder.record() per event without a principal (outcome counters and latency histogram
// only) and with one (plus the Misra-Gries summaries: 'claims' and the outcome's), on a skewed
// stream of 5,000 principals over 50 scopes, beside the Node CPU of a whole claim
// (IdempotencyStore.execute: claim, work, completion) measured on the same machine. Target:
// the top-K's share of a claim's CPU under 2%.
import { randomBytes } from 'node:crypto';
import { claimOutcomes, FlowRecorder, IdempotencyStore, ResponseKeyRing, type FlowEvent } from '@retrysafe/store';
import { createPool } from '../db/client';
import { ensurePolicies } from '../server/retention/policies';
import { defaultPolicyFields } from '../server/demo/policies';
import type { BenchDatabase } from './database';
import { BENCH_SERVICE, benchCall } from './fixtures';
import { mulberry32 } from '../packages/store/test/helpers/flow-events';

const EVENTS = 2_000_000;
const CLAIMS = Number(process.env.BENCH_RECORDER_CLAIMS ?? 3_000);

export interface RecorderCost {
  recordNs: number;
  recordWithPrincipalNs: number;
  claimCpuUs: number;
  /** The top-K's extra CPU per claim as a share of the claim's CPU. */
  topKShare: number;
}

function events(withPrincipal: boolean): FlowEvent[] {
  const random = mulberry32(5);
  const principals = Array.from({ length: 5_000 }, (_, i) => `00000000-0000-0000-0000-${String(i).padStart(12, '0')}`);
  return Array.from({ length: 100_000 }, () => {
    // Skewed: a few principals send most claims; 3% of claims are conflicts, 1% mismatches.
    const principal = principals[Math.floor(5_000 * random() ** 3)] ?? '';
    const draw = random();
    const outcome = draw < 0.03 ? 'conflict' : draw < 0.04 ? 'mismatch' : (claimOutcomes[Math.floor(random() * 2)] ?? 'new');
    const event: FlowEvent = { service: BENCH_SERVICE, scope: `POST /api/v1/scope-${Math.floor(random() * 50)}`, outcome, claimLatencyMs: 0.5 + random() * 3 };
    return withPrincipal ? { ...event, principalId: principal } : event;
  });
}

/**
 * Node CPU (user + system) per record(), ns. Nothing is flushed: what accumulates is bounded by
 * minutes x scopes x outcomes (and k counters a summary) whatever the number of events.
 */
function recordCost(recorder: FlowRecorder, stream: FlowEvent[]): number {
  const started = process.cpuUsage();
  for (let i = 0; i < EVENTS; i += 1) recorder.record(stream[i % stream.length] as FlowEvent);
  const used = process.cpuUsage(started);
  return ((used.user + used.system) * 1000) / EVENTS;
}

export async function benchRecorder(database: BenchDatabase, log: (line: string) => void): Promise<RecorderCost> {
  const pool = createPool(database.url, { applicationName: 'retrysafe-bench', max: 2 });
  try {
    const plain = events(false);
    const named = events(true);
    // Warm up both paths, then measure each twice, alternating.
    recordCost(new FlowRecorder(pool), plain);
    recordCost(new FlowRecorder(pool), named);
    const without: number[] = [];
    const withPrincipal: number[] = [];
    for (let round = 0; round < 2; round += 1) {
      without.push(recordCost(new FlowRecorder(pool), plain));
      withPrincipal.push(recordCost(new FlowRecorder(pool), named));
    }
    const recordNs = Math.min(...without);
    const recordWithPrincipalNs = Math.min(...withPrincipal);
    log(`  record(), outcome and latency only      ${recordNs.toFixed(0).padStart(6)} ns of CPU per event`);
    log(`  record(), with the principals' top-K    ${recordWithPrincipalNs.toFixed(0).padStart(6)} ns of CPU per event`);

    // A whole claim's Node CPU: execute() with a trivial work function, new keys, one caller.
    await ensurePolicies(pool, BENCH_SERVICE, defaultPolicyFields, 'bench');
    const store = new IdempotencyStore({
      pool,
      service: BENCH_SERVICE,
      fingerprintSecret: randomBytes(32),
      keyRing: new ResponseKeyRing([{ id: 'k1', key: randomBytes(32) }]),
      observer: { record: () => undefined },
    });
    const run = async (count: number, prefix: string) => {
      for (let i = 0; i < count; i += 1) {
        await store.execute(benchCall('00000000-0000-0000-0000-000000000001', `${prefix}-${i}`));
      }
    };
    await run(300, 'warm');
    const started = process.cpuUsage();
    await run(CLAIMS, 'measured');
    const used = process.cpuUsage(started);
    const claimCpuUs = (used.user + used.system) / CLAIMS;
    const topKShare = (recordWithPrincipalNs - recordNs) / 1000 / claimCpuUs;
    log(`  a claim (execute, new key), Node CPU    ${claimCpuUs.toFixed(0).padStart(6)} us per claim`);
    log(`  the top-K's share of a claim's CPU: ${(topKShare * 100).toFixed(2)}% (target under 2%); the whole recorder's: ${((recordWithPrincipalNs / 1000 / claimCpuUs) * 100).toFixed(2)}%`);
    return { recordNs, recordWithPrincipalNs, claimCpuUs, topKShare };
  } finally {
    await pool.end();
  }
}
