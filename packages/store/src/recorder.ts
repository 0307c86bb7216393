// The flow recorder: the store's FlowObserver. record() only touches memory (no database
// round trip on the request path); every few seconds flush() adds what accumulated to the
// shared minute buckets in one statement, so the stored figures are the sum over all
// instances. A crash loses at most what accumulated since the last flush.
//
// It also keeps who is behind the outcomes an operator chases (conflicts, mismatches,
// rejections, takeovers, errors) and every principal's claims: per (minute, service, scope,
// outcome) a Misra-Gries summary of PRINCIPAL_TOP_K counters, so memory and rows stay bounded
// however many principals there are. A flush adds each summary's counters to the minute rows
// (summed across instances), plus each service's summary merged over its scopes (scope '*')
// and the store's merged over services (service '*', scope '*'). Each stored count is short
// of the truth by at most N/(k+1) per flush, N that flush's events of the outcome in the row's
// bucket; summed over flushes and instances, by at most N/(k+1) for N the bucket's events.
// The same counters go to their hour and UTC day rows (principal_flow_hour, principal_flow_day,
// migration 0023), for the same reason as the series below: each range of the overview then reads
// one table of few buckets; the roll-up merges recent hours and days down to k counters again
// (server/metrics/rollup.ts), which keeps the bound (a Misra-Gries merge does).
//
// The same flush adds the overview's series (flow_counts_series, claim_latency_series,
// migration 0021): the flushed minute counts binned to each of the overview's steps, for each
// (service, scope), each service over its scopes (scope '*') and the store (both '*'), so that
// every range of the overview reads one row per step and outcome (or latency bucket) however
// many scopes there are. Aggregating at flush costs the flush five steps x three levels of
// upserts on rows that are few (one per bucket, not per claim), computed by the database from
// the arrays it already receives; the request path is untouched. The alternative, building the
// coarse buckets in the roll-up, would need a watermark and the minute rows past it for what a
// late flush adds, which every reader would have to combine.
//
// And the trace of attempts (issue 31.1, migration 0025): each replay, conflict, mismatch and
// quota refusal with its key, correlation id, status and time, kept in memory per key (its
// counts and its last ATTEMPTS_KEPT_PER_KEY attempts) and written by the same statement:
// key_attempt_counts upserted, key_attempts inserted and pruned to the last 20 per key. The
// request path only adds to a Map. A principal may add at most attemptBudgetPerMinute attempt
// rows (or keys) per minute; what exceeds it is counted in droppedAttempts, not kept, so a flood
// from one principal cannot grow memory or the tables without bound (a key already pending still
// counts every attempt, and its ring keeps the newest 20, at no cost in rows).
//
// And the completions that could not be recorded (issue 26.2, migration 0026): an attempt whose
// work ran and whose response the store could not record (IdempotencyStore's onCompletionFailed,
// wired here by createRetrysafe). Its key, correlation id, time and error class wait in memory
// and the same statement inserts them, so the overview counts every instance's. A failing
// database is the likely cause, so they wait through failed flushes; at most unrecordedKept
// (UNRECORDED_KEPT) wait at once, the rest counted in droppedUnrecorded (their keys are still
// in onError's report and the store's unrecordedCompletions).
import type pg from 'pg';
import type { UnrecordedAttempt } from './store.js';
import { principalOutcomes, tracedOutcomes, type ClaimOutcome, type FlowEvent, type FlowObserver, type PrincipalOutcome, type TracedOutcome } from './events.js';
import { MisraGries, mergeHeavyHitters } from './heavy-hitters.js';
import { BUCKET_COUNT, bucketOf } from './histogram.js';
import { periodicTask, type PeriodicTask } from './periodic.js';

/** Counters per (minute, service, scope, outcome) summary: the top-K's k. */
export const PRINCIPAL_TOP_K = 20;
/** The scope (and service) of the rows merged over every scope (and service). */
export const ALL = '*';
/** The overview's steps (seconds), one per range: the series are pre-aggregated at each (migration 0021). */
export const SERIES_STEPS = [60, 300, 900, 3_600, 21_600] as const;

const tracked = new Set<string>(principalOutcomes);
const traced = new Set<string>(tracedOutcomes);

/** Attempts kept per key (in memory and in key_attempts). */
export const ATTEMPTS_KEPT_PER_KEY = 20;
/** Attempt rows (or new keys) one principal may add to the trace per minute (RecorderOptions.attemptBudgetPerMinute). */
export const ATTEMPT_BUDGET_PER_MINUTE = 600;

interface TracedAttempt {
  at: number;
  correlationId: string;
  outcome: TracedOutcome;
  status: number;
}

/** One key's pending trace: its counts since the last flush and its newest attempts (a ring). */
interface TracedKey {
  principalId: string;
  service: string;
  scope: string;
  key: string;
  retentionMs: number;
  counts: Record<TracedOutcome, number>;
  lastAt: number;
  attempts: TracedAttempt[];
  /** The ring's next slot once it is full. */
  next: number;
}

/** Unrecorded completions waiting for a flush, at most (RecorderOptions.unrecordedKept). */
export const UNRECORDED_KEPT = 1_000;

/** One unrecorded completion waiting for the flush. */
interface UnrecordedRow {
  at: number;
  attempt: UnrecordedAttempt;
  errorClass: string;
}

/**
 * An error's class, as the dashboard shows it: its type's name and its code (a SQLSTATE, or
 * Node's ECONNRESET...), never its message, which may quote a value.
 */
export function errorClassOf(error: unknown): string {
  if (typeof error !== 'object' || error === null) return typeof error;
  // The constructor's name: pg's DatabaseError names itself 'error' (the protocol message's name).
  const name = (error as { constructor?: { name?: unknown } }).constructor?.name;
  const code = (error as { code?: unknown }).code;
  const words = [typeof name === 'string' && /^[A-Za-z0-9_]{1,60}$/.test(name) ? name : 'Error'];
  if (typeof code === 'string' && /^[A-Za-z0-9_]{1,40}$/.test(code)) words.push(code);
  return words.join(' ');
}

/** One flush interval's Misra-Gries summary of the principals behind one (minute, service, scope, outcome). */
export interface PrincipalSummary {
  minute: number;
  service: string;
  scope: string;
  outcome: PrincipalOutcome;
  summary: MisraGries;
}

/** One row of principal_flow_minute, as a flush adds it. */
export interface PrincipalRow {
  minute: number;
  service: string;
  scope: string;
  outcome: PrincipalOutcome;
  principalId: string;
  count: number;
}

interface Pending {
  counts: Map<string, { minute: number; service: string; scope: string; outcome: ClaimOutcome; count: number }>;
  latency: Map<string, { minute: number; service: string; scope: string; buckets: Uint32Array }>;
  principals: Map<string, PrincipalSummary>;
  /** Rows of a flush that failed, added again by the next one. */
  carried: PrincipalRow[];
  traced: Map<string, TracedKey>;
  unrecorded: UnrecordedRow[];
}

const empty = (): Pending => ({ counts: new Map(), latency: new Map(), principals: new Map(), carried: [], traced: new Map(), unrecorded: [] });

export interface RecorderOptions {
  flushIntervalMs?: number;
  onError?: (error: unknown) => void;
  now?: () => number;
  /** Counters per principal summary (default PRINCIPAL_TOP_K). */
  principalTopK?: number;
  /** Attempt rows (or new keys) one principal may add to the trace per minute (default ATTEMPT_BUDGET_PER_MINUTE). */
  attemptBudgetPerMinute?: number;
  /** Unrecorded completions waiting for a flush, at most (default UNRECORDED_KEPT). */
  unrecordedKept?: number;
}

export class FlowRecorder implements FlowObserver {
  private pending: Pending = empty();
  private readonly task: PeriodicTask;
  private flushing: Promise<void> | null = null;
  private readonly now: () => number;
  private readonly topK: number;
  private readonly attemptBudget: number;
  /** The trace's use of each principal's budget in budgetMinute. */
  private budgetUsed = new Map<string, number>();
  private budgetMinute = 0;
  /** Traced attempts not kept because their principal's budget for the minute was spent (since start). */
  droppedAttempts = 0;
  /** Unrecorded completions not kept for the dashboard because unrecordedKept were waiting already (since start). */
  droppedUnrecorded = 0;
  private readonly unrecordedKept: number;

  constructor(
    private readonly pool: Pick<pg.Pool, 'query'>,
    private readonly options: RecorderOptions = {},
  ) {
    this.now = options.now ?? Date.now;
    this.topK = options.principalTopK ?? PRINCIPAL_TOP_K;
    this.attemptBudget = options.attemptBudgetPerMinute ?? ATTEMPT_BUDGET_PER_MINUTE;
    this.unrecordedKept = options.unrecordedKept ?? UNRECORDED_KEPT;
    this.task = periodicTask({
      name: 'flow metrics flush',
      intervalMs: options.flushIntervalMs ?? 5_000,
      run: () => this.flush(),
      onError: (error) => options.onError?.(error),
    });
  }

  record(event: FlowEvent): void {
    const minute = Math.floor(this.now() / 60_000) * 60_000;
    const countKey = `${minute}\0${event.service}\0${event.scope}\0${event.outcome}`;
    const count = this.pending.counts.get(countKey);
    if (count) count.count += 1;
    else this.pending.counts.set(countKey, { minute, service: event.service, scope: event.scope, outcome: event.outcome, count: 1 });
    const principalId = event.principalId;
    if (principalId !== undefined) {
      const scopeKey = `${minute}\0${event.service}\0${event.scope}\0`;
      this.countPrincipal(scopeKey, minute, event, principalId, 'claims');
      if (tracked.has(event.outcome)) this.countPrincipal(scopeKey, minute, event, principalId, event.outcome as PrincipalOutcome);
      if (traced.has(event.outcome) && event.key !== undefined && event.correlationId !== undefined && event.status !== undefined) {
        this.trace(minute, principalId, event);
      }
    }
    if (event.claimLatencyMs === undefined) return;
    const latencyKey = `${minute}\0${event.service}\0${event.scope}`;
    let histogram = this.pending.latency.get(latencyKey);
    if (!histogram) {
      histogram = { minute, service: event.service, scope: event.scope, buckets: new Uint32Array(BUCKET_COUNT) };
      this.pending.latency.set(latencyKey, histogram);
    }
    const bucket = bucketOf(event.claimLatencyMs);
    histogram.buckets[bucket] = (histogram.buckets[bucket] ?? 0) + 1;
  }

  /**
   * An attempt whose work ran and whose response could not be recorded: kept for the next flush
   * (with its error's class, never its message), unless unrecordedKept are waiting already.
   */
  completionUnrecorded(attempt: UnrecordedAttempt, error: unknown): void {
    if (this.pending.unrecorded.length >= this.unrecordedKept) {
      this.droppedUnrecorded += 1;
      return;
    }
    this.pending.unrecorded.push({ at: this.now(), attempt, errorClass: errorClassOf(error) });
  }

  /** Adds a traced attempt to its key's pending counts and ring, within its principal's budget. */
  private trace(minute: number, principalId: string, event: FlowEvent): void {
    if (minute !== this.budgetMinute) {
      this.budgetMinute = minute;
      this.budgetUsed = new Map();
    }
    const id = `${principalId}\0${event.service}\0${event.scope}\0${event.key}`;
    const pending = this.pending.traced.get(id);
    const outcome = event.outcome as TracedOutcome;
    const full = pending !== undefined && pending.attempts.length >= ATTEMPTS_KEPT_PER_KEY;
    if (!full) {
      // A new key or a new row: charged to the principal's budget for the minute.
      const used = this.budgetUsed.get(principalId) ?? 0;
      if (used >= this.attemptBudget) {
        this.droppedAttempts += 1;
        if (pending) pending.counts[outcome] += 1; // counting costs nothing more
        return;
      }
      this.budgetUsed.set(principalId, used + 1);
    }
    const at = this.now();
    const attempt: TracedAttempt = { at, correlationId: event.correlationId as string, outcome, status: event.status as number };
    if (!pending) {
      const counts = { replay: 0, conflict: 0, mismatch: 0, rejected: 0 };
      counts[outcome] = 1;
      this.pending.traced.set(id, {
        principalId,
        service: event.service,
        scope: event.scope,
        key: event.key as string,
        retentionMs: event.retentionMs ?? 86_400_000,
        counts,
        lastAt: at,
        attempts: [attempt],
        next: 0,
      });
      return;
    }
    pending.counts[outcome] += 1;
    pending.lastAt = at;
    if (!full) pending.attempts.push(attempt);
    else {
      pending.attempts[pending.next] = attempt; // the oldest of the ring
      pending.next = (pending.next + 1) % ATTEMPTS_KEPT_PER_KEY;
    }
  }

  private countPrincipal(scopeKey: string, minute: number, event: FlowEvent, principalId: string, outcome: PrincipalOutcome): void {
    const key = scopeKey + outcome;
    let cell = this.pending.principals.get(key);
    if (!cell) {
      cell = { minute, service: event.service, scope: event.scope, outcome, summary: new MisraGries(this.topK) };
      this.pending.principals.set(key, cell);
    }
    cell.summary.add(principalId);
  }

  start(): void {
    this.task.start();
  }

  async stop(): Promise<void> {
    await this.task.stop();
    await this.flush();
  }

  /**
   * Adds everything recorded so far to the stored buckets; one flush at a time. Rows are
   * upserted in primary-key order, so instances flushing the same buckets at once lock
   * them in the same order and cannot deadlock.
   */
  flush(): Promise<void> {
    this.flushing ??= this.flushOnce().finally(() => (this.flushing = null));
    return this.flushing;
  }

  private async flushOnce(): Promise<void> {
    const batch = this.pending;
    this.pending = empty();
    if (batch.counts.size === 0 && batch.latency.size === 0 && batch.principals.size === 0 && batch.carried.length === 0 && batch.traced.size === 0 && batch.unrecorded.length === 0) return;
    const principals = [...batch.carried, ...principalRows(batch.principals.values(), this.topK)];
    const counts = [...batch.counts.values()];
    const cells: { minute: number; service: string; scope: string; bucket: number; count: number }[] = [];
    for (const histogram of batch.latency.values()) {
      histogram.buckets.forEach((count, bucket) => {
        if (count > 0) cells.push({ minute: histogram.minute, service: histogram.service, scope: histogram.scope, bucket, count });
      });
    }
    const keys = [...batch.traced.values()];
    const attempts: (TracedAttempt & { of: TracedKey })[] = [];
    for (const key of keys) for (const attempt of key.attempts) attempts.push({ ...attempt, of: key });
    const unrecorded = batch.unrecorded;
    try {
      await this.pool.query({
        name: 'metrics_flush',
        text: `
WITH principals AS (
  INSERT INTO retrysafe.principal_flow_minute (service, scope, minute, outcome, principal_id, count)
  SELECT v, s, to_timestamp(m / 1000.0), o, p, sum(c) FROM unnest($11::text[], $12::text[], $13::bigint[], $14::text[], $15::uuid[], $16::bigint[]) AS t(v, s, m, o, p, c)
  GROUP BY v, s, m, o, p ORDER BY 1, 2, 3, 4, 5
  ON CONFLICT (service, scope, minute, outcome, principal_id) DO UPDATE SET count = principal_flow_minute.count + EXCLUDED.count
), principal_hours AS (
  -- The same counters in their hour and their UTC day (migration 0023), so each range of the
  -- overview reads one table; the roll-up merges recent hours and days down to top-K.
  INSERT INTO retrysafe.principal_flow_hour (service, scope, hour, outcome, principal_id, count)
  SELECT v, s, date_bin('1 hour', to_timestamp(m / 1000.0), timestamptz 'epoch'), o, p, sum(c) FROM unnest($11::text[], $12::text[], $13::bigint[], $14::text[], $15::uuid[], $16::bigint[]) AS t(v, s, m, o, p, c)
  GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
  ON CONFLICT (service, scope, hour, outcome, principal_id) DO UPDATE SET count = principal_flow_hour.count + EXCLUDED.count
), principal_days AS (
  INSERT INTO retrysafe.principal_flow_day (service, scope, day, outcome, principal_id, count)
  SELECT v, s, date_bin('1 day', to_timestamp(m / 1000.0), timestamptz 'epoch'), o, p, sum(c) FROM unnest($11::text[], $12::text[], $13::bigint[], $14::text[], $15::uuid[], $16::bigint[]) AS t(v, s, m, o, p, c)
  GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
  ON CONFLICT (service, scope, day, outcome, principal_id) DO UPDATE SET count = principal_flow_day.count + EXCLUDED.count
), counted AS (
  INSERT INTO retrysafe.flow_counts_minute (minute, service, scope, outcome, count)
  SELECT to_timestamp(m / 1000.0), v, s, o, c FROM unnest($1::bigint[], $9::text[], $2::text[], $3::text[], $4::bigint[]) AS t(m, v, s, o, c)
  ORDER BY 1, 2, 3, 4
  ON CONFLICT (minute, service, scope, outcome) DO UPDATE SET count = flow_counts_minute.count + EXCLUDED.count
), latency AS (
  INSERT INTO retrysafe.claim_latency_minute (minute, service, scope, bucket, count)
  SELECT to_timestamp(m / 1000.0), v, s, b, c FROM unnest($5::bigint[], $10::text[], $6::text[], $7::smallint[], $8::bigint[]) AS t(m, v, s, b, c)
  ORDER BY 1, 2, 3, 4
  ON CONFLICT (minute, service, scope, bucket) DO UPDATE SET count = claim_latency_minute.count + EXCLUDED.count
), steps AS (
  SELECT step FROM unnest($17::int[]) AS st(step)
), counted_series AS (
  -- Each (step, service, scope), each service over its scopes and the store; the outer sum folds
  -- a scope or service really named '*' into the merged row rather than upserting a row twice.
  INSERT INTO retrysafe.flow_counts_series (step, service, scope, at, outcome, count)
  SELECT step, v, s, at, o, sum(c) FROM (
    SELECT step, CASE WHEN grouping(v) = 1 THEN '*' ELSE v END AS v, CASE WHEN grouping(s) = 1 THEN '*' ELSE s END AS s,
           date_bin(step * interval '1 second', to_timestamp(m / 1000.0), timestamptz 'epoch') AS at, o, sum(c) AS c
    FROM unnest($1::bigint[], $9::text[], $2::text[], $3::text[], $4::bigint[]) AS t(m, v, s, o, c) CROSS JOIN steps
    GROUP BY step, 4, o, GROUPING SETS ((v, s), (v), ())
  ) AS binned GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
  ON CONFLICT (step, service, scope, at, outcome) DO UPDATE SET count = flow_counts_series.count + EXCLUDED.count
), latency_series AS (
INSERT INTO retrysafe.claim_latency_series (step, service, scope, at, bucket, count)
SELECT step, v, s, at, b, sum(c) FROM (
  SELECT step, CASE WHEN grouping(v) = 1 THEN '*' ELSE v END AS v, CASE WHEN grouping(s) = 1 THEN '*' ELSE s END AS s,
         date_bin(step * interval '1 second', to_timestamp(m / 1000.0), timestamptz 'epoch') AS at, b, sum(c) AS c
  FROM unnest($5::bigint[], $10::text[], $6::text[], $7::smallint[], $8::bigint[]) AS t(m, v, s, b, c) CROSS JOIN steps
  GROUP BY step, 4, b, GROUPING SETS ((v, s), (v), ())
) AS binned GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
ON CONFLICT (step, service, scope, at, bucket) DO UPDATE SET count = claim_latency_series.count + EXCLUDED.count
RETURNING 1
), traced_keys AS (
  -- The trace (migration 0025). Each key's expiry: its live row's (by the primary key), else the
  -- attempt's time plus its policy's retention (a refusal of a key never created, a key gone).
  SELECT t.p, t.v, t.s, t.k, t.replays, t.conflicts, t.mismatches, t.refusals, to_timestamp(t.last / 1000.0) AS last_at,
         coalesce(live.expires_at, to_timestamp(t.last / 1000.0) + t.ret * interval '1 millisecond') AS expires_at
  FROM unnest($18::uuid[], $19::text[], $20::text[], $21::text[], $22::int[], $23::int[], $24::int[], $25::int[], $26::bigint[], $27::bigint[])
       AS t(p, v, s, k, replays, conflicts, mismatches, refusals, last, ret)
  LEFT JOIN LATERAL (
    SELECT ik.expires_at FROM retrysafe.idempotency_keys ik
    WHERE ik.principal_id = t.p AND ik.service = t.v AND ik.scope = t.s AND ik.key = t.k AND ik.expires_at > now()
    ORDER BY ik.expires_at DESC LIMIT 1
  ) AS live ON true
), traced_counts AS (
  -- Counts of a key past its expiry start again: they belonged to the key that expired.
  INSERT INTO retrysafe.key_attempt_counts AS c (principal_id, service, scope, key, replays, conflicts, mismatches, quota_refusals, last_at, expires_at)
  SELECT p, v, s, k, replays, conflicts, mismatches, refusals, last_at, expires_at FROM traced_keys ORDER BY 1, 2, 3, 4
  ON CONFLICT (principal_id, service, scope, key) DO UPDATE SET
    replays = CASE WHEN c.expires_at <= now() THEN 0 ELSE c.replays END + EXCLUDED.replays,
    conflicts = CASE WHEN c.expires_at <= now() THEN 0 ELSE c.conflicts END + EXCLUDED.conflicts,
    mismatches = CASE WHEN c.expires_at <= now() THEN 0 ELSE c.mismatches END + EXCLUDED.mismatches,
    quota_refusals = CASE WHEN c.expires_at <= now() THEN 0 ELSE c.quota_refusals END + EXCLUDED.quota_refusals,
    last_at = greatest(c.last_at, EXCLUDED.last_at),
    expires_at = CASE WHEN c.expires_at <= now() THEN EXCLUDED.expires_at ELSE greatest(c.expires_at, EXCLUDED.expires_at) END
  RETURNING 1
), traced_rows AS (
  SELECT a.p, a.v, a.s, a.k, to_timestamp(a.at / 1000.0) AS at, a.c, a.o, a.st, tk.expires_at
  FROM unnest($28::uuid[], $29::text[], $30::text[], $31::text[], $32::bigint[], $33::uuid[], $34::text[], $35::smallint[]) AS a(p, v, s, k, at, c, o, st)
  JOIN traced_keys tk ON tk.p = a.p AND tk.v = a.v AND tk.s = a.s AND tk.k = a.k
), traced_inserted AS (
  INSERT INTO retrysafe.key_attempts (principal_id, service, scope, key, at, correlation_id, outcome, status, expires_at)
  SELECT p, v, s, k, at, c, o, st, expires_at FROM traced_rows ORDER BY 1, 2, 3, 4, 5, 6
  ON CONFLICT DO NOTHING
  RETURNING 1
), traced_fresh AS (
  SELECT p, v, s, k, count(*) AS fresh FROM traced_rows GROUP BY 1, 2, 3, 4
), unrecorded AS (
  -- Completions that could not be recorded (migration 0026), kept as long as their key would have
  -- been; one sent again after its flush's answer was lost is there already.
  INSERT INTO retrysafe.unrecorded_completions (principal_id, service, scope, key, correlation_id, at, expires_at, error_class)
  SELECT p, v, s, k, c, to_timestamp(at / 1000.0), to_timestamp(at / 1000.0) + ret * interval '1 millisecond', e
  FROM unnest($37::uuid[], $38::text[], $39::text[], $40::text[], $41::uuid[], $42::bigint[], $43::bigint[], $44::text[]) AS u(p, v, s, k, c, at, ret, e)
  ORDER BY 1, 2, 3, 4, 5
  ON CONFLICT DO NOTHING
  RETURNING 1
)
-- The key's stored attempts past the newest 20 (counting this flush's, which this statement's
-- snapshot cannot see) or past its expiry, by the primary key's prefix.
DELETE FROM retrysafe.key_attempts a USING (
  SELECT ranked.ctid FROM (
    SELECT old.ctid, old.expires_at, f.fresh,
           row_number() OVER (PARTITION BY old.principal_id, old.service, old.scope, old.key ORDER BY old.at DESC, old.correlation_id DESC) AS rank
    FROM traced_fresh f JOIN retrysafe.key_attempts old
      ON old.principal_id = f.p AND old.service = f.v AND old.scope = f.s AND old.key = f.k
  ) AS ranked WHERE ranked.rank > $36::int - ranked.fresh OR ranked.expires_at <= now()
) AS doomed WHERE a.ctid = doomed.ctid`,
        values: [
          counts.map((cell) => cell.minute),
          counts.map((cell) => cell.scope),
          counts.map((cell) => cell.outcome),
          counts.map((cell) => cell.count),
          cells.map((cell) => cell.minute),
          cells.map((cell) => cell.scope),
          cells.map((cell) => cell.bucket),
          cells.map((cell) => cell.count),
          counts.map((cell) => cell.service),
          cells.map((cell) => cell.service),
          principals.map((row) => row.service),
          principals.map((row) => row.scope),
          principals.map((row) => row.minute),
          principals.map((row) => row.outcome),
          principals.map((row) => row.principalId),
          principals.map((row) => row.count),
          SERIES_STEPS,
          keys.map((key) => key.principalId),
          keys.map((key) => key.service),
          keys.map((key) => key.scope),
          keys.map((key) => key.key),
          keys.map((key) => key.counts.replay),
          keys.map((key) => key.counts.conflict),
          keys.map((key) => key.counts.mismatch),
          keys.map((key) => key.counts.rejected),
          keys.map((key) => key.lastAt),
          keys.map((key) => Math.round(key.retentionMs)),
          attempts.map((attempt) => attempt.of.principalId),
          attempts.map((attempt) => attempt.of.service),
          attempts.map((attempt) => attempt.of.scope),
          attempts.map((attempt) => attempt.of.key),
          attempts.map((attempt) => attempt.at),
          attempts.map((attempt) => attempt.correlationId),
          attempts.map((attempt) => attempt.outcome),
          attempts.map((attempt) => attempt.status),
          ATTEMPTS_KEPT_PER_KEY,
          unrecorded.map((row) => row.attempt.principalId),
          unrecorded.map((row) => row.attempt.service),
          unrecorded.map((row) => row.attempt.scope),
          unrecorded.map((row) => row.attempt.key),
          unrecorded.map((row) => row.attempt.correlationId),
          unrecorded.map((row) => row.at),
          unrecorded.map((row) => Math.round(row.attempt.retentionMs)),
          unrecorded.map((row) => row.errorClass),
        ],
      });
    } catch (error) {
      this.merge(batch, principals); // nothing was written: keep the counts for the next flush
      throw error;
    }
  }

  private merge(batch: Pending, principals: PrincipalRow[]): void {
    this.pending.carried.push(...principals);
    // The older ones first, within the bound: what it leaves out is counted.
    const unrecorded = [...batch.unrecorded, ...this.pending.unrecorded];
    this.droppedUnrecorded += Math.max(0, unrecorded.length - this.unrecordedKept);
    this.pending.unrecorded = unrecorded.slice(0, this.unrecordedKept);
    for (const [id, key] of batch.traced) {
      const current = this.pending.traced.get(id);
      if (!current) {
        this.pending.traced.set(id, key);
        continue;
      }
      // The newer attempts are the current ones: keep the newest 20 of both.
      for (const outcome of tracedOutcomes) current.counts[outcome] += key.counts[outcome];
      const both = [...key.attempts, ...current.attempts].sort((a, b) => a.at - b.at);
      current.attempts = both.slice(-ATTEMPTS_KEPT_PER_KEY);
      current.next = 0;
      current.lastAt = Math.max(current.lastAt, key.lastAt);
    }
    for (const [key, cell] of batch.counts) {
      const current = this.pending.counts.get(key);
      if (current) current.count += cell.count;
      else this.pending.counts.set(key, cell);
    }
    for (const [key, histogram] of batch.latency) {
      const current = this.pending.latency.get(key);
      if (!current) {
        this.pending.latency.set(key, histogram);
        continue;
      }
      histogram.buckets.forEach((count, bucket) => {
        current.buckets[bucket] = (current.buckets[bucket] ?? 0) + count;
      });
    }
  }
}

/**
 * A flush's principal rows: each summary's counters as they are, each service's summaries of
 * one (minute, outcome) merged over its scopes (scope ALL), and those merged over services
 * (service and scope ALL); each merge keeps k counters, within N/(k+1) of the merged events.
 */
export function principalRows(summaries: Iterable<PrincipalSummary>, k: number): PrincipalRow[] {
  const rows: PrincipalRow[] = [];
  const byService = new Map<string, { minute: number; service: string; outcome: PrincipalOutcome; parts: { entries: { item: string; count: number }[]; total: number }[] }>();
  for (const cell of summaries) {
    const entries = cell.summary.entries();
    for (const { item, count } of entries) rows.push({ minute: cell.minute, service: cell.service, scope: cell.scope, outcome: cell.outcome, principalId: item, count });
    const key = `${cell.minute}\0${cell.service}\0${cell.outcome}`;
    let group = byService.get(key);
    if (!group) byService.set(key, (group = { minute: cell.minute, service: cell.service, outcome: cell.outcome, parts: [] }));
    group.parts.push({ entries, total: cell.summary.total });
  }
  const byStore = new Map<string, { minute: number; outcome: PrincipalOutcome; parts: { entries: { item: string; count: number }[]; total: number }[] }>();
  for (const group of byService.values()) {
    const merged = mergeHeavyHitters(group.parts, k);
    for (const { item, count } of merged.entries) rows.push({ minute: group.minute, service: group.service, scope: ALL, outcome: group.outcome, principalId: item, count });
    const key = `${group.minute}\0${group.outcome}`;
    let store = byStore.get(key);
    if (!store) byStore.set(key, (store = { minute: group.minute, outcome: group.outcome, parts: [] }));
    store.parts.push(merged);
  }
  for (const store of byStore.values()) {
    for (const { item, count } of mergeHeavyHitters(store.parts, k).entries) rows.push({ minute: store.minute, service: ALL, scope: ALL, outcome: store.outcome, principalId: item, count });
  }
  return rows;
}

/** Fans one event out to several observers (e.g. the recorder and the Prometheus counters). */
export function observeAll(...observers: FlowObserver[]): FlowObserver {
  return { record: (event) => observers.forEach((observer) => observer.record(event)) };
}
