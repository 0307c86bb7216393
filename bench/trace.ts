// The attempt trace's cost (issue #31, point 1): the whole request (IdempotencyStore.execute:
// fingerprint, claim, trivial work, completion or replay) with the flow recorder tracing every
// replay (an attempt budget no principal reaches) beside the same store whose recorder keeps no
// attempt (budget 0: each traced attempt is dropped at its budget check, so no ring and no
// key_attempts rows; the check's own Map lookup stays on both sides). New keys (never traced)
// and replays of pre-created keys, 8 callers, one principal per caller, alternating rounds, each
// side's recorder flushing every second inside its own window and once more at its end (counted
// in its time). Target: traced / untraced >= 0.95x. Part of `npm run bench -- recorder`.
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { FlowRecorder, IdempotencyStore, ResponseKeyRing } from '@retrysafe/store';
import { STORE_POOL_SETTINGS } from '@retrysafe/store/postgres';
import { ensurePolicies } from '../server/retention/policies';
import { defaultPolicyFields } from '../server/demo/policies';
import type { BenchDatabase } from './database';
import { BENCH_SERVICE, benchCall } from './fixtures';
import { runClosedLoopWithCpu } from './measure';

const CALLERS = 8;
const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const REPLAY_KEYS_PER_CALLER = 200;
/** The traced side's attempt budget per principal and minute: every attempt by default; BENCH_TRACE_BUDGET=600 is the package's default. */
const TRACED_BUDGET = Number(process.env.BENCH_TRACE_BUDGET ?? Number.MAX_SAFE_INTEGER);

type Side = 'traced' | 'untraced';
type Kind = 'new' | 'replay';

export interface TraceCost {
  kind: Kind;
  tracedPerSecond: number;
  untracedPerSecond: number;
  ratio: number;
  tracedCpuUs: number;
  untracedCpuUs: number;
}

export async function benchTrace(database: BenchDatabase, log: (line: string) => void): Promise<TraceCost[]> {
  const pool = new pg.Pool({ connectionString: database.url, max: CALLERS * 2, ...STORE_POOL_SETTINGS });
  try {
    await ensurePolicies(pool, BENCH_SERVICE, defaultPolicyFields, 'bench');
    const secrets = { fingerprintSecret: randomBytes(32), keyRing: new ResponseKeyRing([{ id: 'k1', key: randomBytes(32) }]) };
    const recorders: Record<Side, FlowRecorder> = {
      traced: new FlowRecorder(pool, { attemptBudgetPerMinute: TRACED_BUDGET }),
      untraced: new FlowRecorder(pool, { attemptBudgetPerMinute: 0 }),
    };
    const stores: Record<Side, IdempotencyStore> = {
      traced: new IdempotencyStore({ pool, service: BENCH_SERVICE, ...secrets, observer: recorders.traced }),
      untraced: new IdempotencyStore({ pool, service: BENCH_SERVICE, ...secrets, observer: recorders.untraced }),
    };
    const principals = Array.from({ length: CALLERS }, () => randomUUID());
    const call = (store: IdempotencyStore, worker: number, key: string) => store.execute(benchCall(principals[worker] ?? '', key));
    // The keys every replay asks for, made once (both stores share the key ring and the fingerprint secret).
    for (let worker = 0; worker < CALLERS; worker += 1) {
      await Promise.all(Array.from({ length: REPLAY_KEYS_PER_CALLER }, (_, i) => call(stores.untraced, worker, `replayed-${i}`)));
    }
    await recorders.untraced.flush();
    const totals = new Map<string, { operations: number; seconds: number; cpuUs: number }>();
    const measure = async (side: Side, kind: Kind, round: number) => {
      const store = stores[side];
      const recorder = recorders[side];
      const flusher = setInterval(() => void recorder.flush().catch(() => undefined), 1_000);
      const { run, cpuMicrosPerRequest } = await runClosedLoopWithCpu(CALLERS, SECONDS * 1000, async (worker, iteration) => {
        const key = kind === 'new' ? `${side}-${round}-${worker}-${iteration}` : `replayed-${iteration % REPLAY_KEYS_PER_CALLER}`;
        const outcome = await call(store, worker, key);
        if (kind === 'replay' && !outcome.replayed) throw new Error(`bench: ${key} was not replayed`);
      });
      clearInterval(flusher);
      // What this window left to write is this side's cost too.
      const flushStarted = performance.now();
      await recorder.flush();
      const seconds = run.seconds + (performance.now() - flushStarted) / 1000;
      const total = totals.get(`${side} ${kind}`) ?? { operations: 0, seconds: 0, cpuUs: 0 };
      totals.set(`${side} ${kind}`, { operations: total.operations + run.operations, seconds: total.seconds + seconds, cpuUs: total.cpuUs + cpuMicrosPerRequest * run.operations });
    };
    for (let round = 0; round < ROUNDS; round += 1) {
      const order: Side[] = round % 2 === 0 ? ['traced', 'untraced'] : ['untraced', 'traced'];
      for (const kind of ['new', 'replay'] as const) for (const side of order) await measure(side, kind, round);
    }
    const results: TraceCost[] = (['new', 'replay'] as const).map((kind) => {
      const traced = totals.get(`traced ${kind}`) ?? { operations: 0, seconds: 1, cpuUs: 0 };
      const untraced = totals.get(`untraced ${kind}`) ?? { operations: 0, seconds: 1, cpuUs: 0 };
      const tracedPerSecond = traced.operations / traced.seconds;
      const untracedPerSecond = untraced.operations / untraced.seconds;
      return {
        kind,
        tracedPerSecond,
        untracedPerSecond,
        ratio: tracedPerSecond / untracedPerSecond,
        tracedCpuUs: traced.cpuUs / Math.max(1, traced.operations),
        untracedCpuUs: untraced.cpuUs / Math.max(1, untraced.operations),
      };
    });
    const { rows } = await pool.query<{ attempts: string }>('SELECT count(*) AS attempts FROM retrysafe.key_attempts');
    for (const result of results) {
      log(
        `  ${result.kind === 'new' ? 'new keys' : 'replays '}  traced ${result.tracedPerSecond.toFixed(0).padStart(6)}/s (${result.tracedCpuUs.toFixed(0)} us Node CPU)` +
          `   untraced ${result.untracedPerSecond.toFixed(0).padStart(6)}/s (${result.untracedCpuUs.toFixed(0)} us)   traced / untraced ${result.ratio.toFixed(2)}x (target >= 0.95x)`,
      );
    }
    log(`  traced side's attempt budget: ${TRACED_BUDGET === Number.MAX_SAFE_INTEGER ? 'unlimited (every attempt)' : `${TRACED_BUDGET} a principal a minute`}; ${CALLERS} callers, ${ROUNDS} alternating rounds of ${SECONDS} s; attempts kept in key_attempts at the end: ${Number(rows[0]?.attempts ?? 0).toLocaleString('en')}; dropped by the untraced side's budget: ${recorders.untraced.droppedAttempts.toLocaleString('en')}`);
    return results;
  } finally {
    await pool.end();
  }
}
