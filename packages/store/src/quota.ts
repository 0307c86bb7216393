// The live-key quota: how many keys one principal may create in a scope within the
// retention window. Enforced across instances without a hot row: each instance counts
// its own new claims in memory, adds them to its own counter rows in one batched upsert
// every flush interval, and reads back the cluster-wide totals of the principals it
// serves. Counting by whole hour buckets is conservative (a key leaves the count up to
// one bucket after it left the window, never before).
//
// Exact on one instance: a request takes its slot synchronously when it is admitted
// (reserve), before the claim's round trip, and the slot becomes a counted key (keep) or
// is given back (release) once the claim has said whether a new key was made. Requests
// for a principal whose count is not loaded yet wait on its one load, then reserve one
// by one. So on one instance at most `quota` keys are ever counted or in flight.
//
// Across instances (stated in docs/compliance.md): each instance admits only while what it knows
// (the cluster total as last read, plus its own unflushed and reserved keys) is under the
// quota, so it never holds more than `quota` keys of a principal itself; another instance's
// keys become visible here within about two flush intervals. A principal can therefore
// exceed its quota by what it creates on other instances in that lag, and never by more
// than that: at most N x quota keys in a window with N instances (reached by a burst that
// starts on all N at once, before any of them has flushed). An instance that dies without
// stop() loses the counts it had not flushed yet (at most one flush interval's new keys).
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { periodicTask, type PeriodicTask } from './periodic.js';

/**
 * The live-key quota's options. The quota is exact per instance: a principal's requests in
 * flight on one instance never create more than its quota. Across N instances a principal can
 * exceed it by what it creates on the other instances within about two `flushIntervalMs`
 * (the time one instance's keys take to reach another's count), and by at most (N - 1) x quota:
 * at most N x quota keys per principal and scope in a window, however many requests are in flight.
 */
export interface QuotaOptions {
  /** The service whose keys this counts (createRetrysafe sets it). */
  service: string;
  instanceId?: string;
  bucketMs?: number;
  /**
   * How often this instance adds its new keys to the shared counters and re-reads the totals
   * (default 1 s). The cross-instance overshoot is what a principal creates on other instances
   * in about two of these, never more than (N - 1) x quota with N instances.
   */
  flushIntervalMs?: number;
  /** Entries not used for this long are forgotten (re-read on next use). */
  idleMs?: number;
  onError?: (error: unknown) => void;
}

export type QuotaDecision = { allowed: true } | { allowed: false; retryAfterSeconds: number };

/** A refusal: no new key for this principal now, retry after this many seconds. */
export type QuotaRefusal = Extract<QuotaDecision, { allowed: false }>;

const ALLOWED: QuotaDecision = Object.freeze({ allowed: true });

/** The refusal while slots are only reserved by requests in flight: some may be given back in a moment. */
const IN_FLIGHT_FULL: QuotaRefusal = Object.freeze({ allowed: false, retryAfterSeconds: 1 });

/**
 * One admitted request's slot in its principal's quota, taken before its claim: kept as a
 * counted key if the claim made a new key, given back otherwise. Settling twice does nothing.
 */
export class QuotaReservation {
  private open = true;

  /** @internal */
  constructor(
    private readonly quota: LiveKeyQuota,
    /** @internal */
    readonly entry: object,
  ) {}

  /** The claim made a new key: it counts (until it leaves the window) instead of the reservation. */
  keep(): void {
    if (!this.open) return;
    this.open = false;
    this.quota.settleReservation(this, true);
  }

  /** No new key was made (a replay, a conflict, a mismatch, a takeover of a live key, a failure, a rollback). */
  release(): void {
    if (!this.open) return;
    this.open = false;
    this.quota.settleReservation(this, false);
  }
}

interface Entry {
  principalId: string;
  scope: string;
  windowMs: number;
  /** Cluster-wide claims in the window as last read (includes what this instance flushed). */
  knownTotal: number;
  /** Start of the oldest bucket counted in knownTotal, for Retry-After. */
  oldestBucketMs: number | null;
  pending: Map<number, number>;
  inFlight: number;
  /** Slots taken by requests admitted on this instance whose claim has not settled yet. */
  reserved: number;
  loaded: Promise<void> | null;
  /** `loaded` has settled successfully: the counts are known. */
  ready: boolean;
  lastUsedMs: number;
}

export class LiveKeyQuota {
  readonly instanceId: string;
  readonly service: string;
  private readonly bucketMs: number;
  private readonly flushIntervalMs: number;
  private readonly idleMs: number;
  private readonly onError: (error: unknown) => void;
  private readonly entries = new Map<string, Entry>();
  private task: PeriodicTask | null = null;
  private flushing: Promise<void> | null = null;

  constructor(
    private readonly pool: Pick<pg.Pool, 'query'>,
    options: QuotaOptions,
  ) {
    this.service = options.service;
    this.instanceId = options.instanceId ?? randomUUID();
    this.bucketMs = options.bucketMs ?? 3_600_000;
    this.flushIntervalMs = options.flushIntervalMs ?? 1_000;
    this.idleMs = options.idleMs ?? 600_000;
    this.onError = options.onError ?? (() => undefined);
  }

  start(): void {
    this.task ??= periodicTask({ name: 'key quota flush', intervalMs: this.flushIntervalMs, run: () => this.flush(), onError: (error) => this.onError(error) });
    this.task.start();
  }

  async stop(): Promise<void> {
    await this.task?.stop();
    await this.flush();
  }

  /** Whether one more new key fits (reserving nothing). Reads the database only the first time a principal is seen. */
  async check(principalId: string, scope: string, quota: number, windowMs: number): Promise<QuotaDecision> {
    const entry = this.entry(principalId, scope, windowMs);
    await this.load(entry);
    return this.decide(entry, quota, windowMs);
  }

  /**
   * Admits one request that may create a new key: its reservation (to keep or release once the
   * claim has settled), the refusal, or undefined when this principal's count is not loaded yet
   * (then reserve() waits for it). Synchronous, so concurrent requests cannot all pass one check.
   */
  reserveLoaded(principalId: string, scope: string, quota: number, windowMs: number): QuotaReservation | QuotaRefusal | undefined {
    const entry = this.entry(principalId, scope, windowMs);
    return entry.ready ? this.take(entry, quota, windowMs) : undefined;
  }

  /** reserveLoaded(), waiting for the principal's one load first: requests that arrive meanwhile wait on it, then reserve in turn. */
  async reserve(principalId: string, scope: string, quota: number, windowMs: number): Promise<QuotaReservation | QuotaRefusal> {
    let entry = this.entry(principalId, scope, windowMs);
    while (!entry.ready) {
      await this.load(entry);
      // The entry read again: one forgotten while its load ran (idle) is loaded anew.
      entry = this.entry(principalId, scope, windowMs);
    }
    return this.take(entry, quota, windowMs);
  }

  private take(entry: Entry, quota: number, windowMs: number): QuotaReservation | QuotaRefusal {
    const decision = this.decide(entry, quota, windowMs);
    if (!decision.allowed) return decision;
    entry.reserved += 1;
    return new QuotaReservation(this, entry);
  }

  /** @internal A reservation's end: counted as a new key, or given back. */
  settleReservation(reservation: QuotaReservation, created: boolean): void {
    const entry = reservation.entry as Entry;
    entry.reserved -= 1;
    if (created) this.count(entry);
  }

  private load(entry: Entry): Promise<void> {
    entry.loaded ??= this.refresh([entry]).then(
      () => {
        entry.ready = true;
      },
      (error: unknown) => {
        entry.loaded = null; // read again on the next request
        throw error;
      },
    );
    return entry.loaded;
  }

  /**
   * check() without waiting: the decision when this principal's count is loaded (as it is from
   * its second request on), undefined when check() must read it first. The request path's way
   * to skip a promise per request.
   */
  checkLoaded(principalId: string, scope: string, quota: number, windowMs: number): QuotaDecision | undefined {
    const entry = this.entry(principalId, scope, windowMs);
    return entry.ready ? this.decide(entry, quota, windowMs) : undefined;
  }

  private decide(entry: Entry, quota: number, windowMs: number): QuotaDecision {
    let used = entry.knownTotal + entry.inFlight;
    for (const count of entry.pending.values()) used += count;
    if (used + entry.reserved < quota) return ALLOWED;
    if (used < quota) return IN_FLIGHT_FULL;
    const oldest = entry.oldestBucketMs ?? this.bucketStart(Date.now());
    const retryAfterMs = oldest + this.bucketMs + windowMs - Date.now();
    return { allowed: false, retryAfterSeconds: Math.max(1, Math.ceil(retryAfterMs / 1000)) };
  }

  /** Counts a key this instance just created without a reservation. */
  note(principalId: string, scope: string, windowMs: number): void {
    this.count(this.entry(principalId, scope, windowMs));
  }

  private count(entry: Entry): void {
    const bucket = this.bucketStart(Date.now());
    entry.pending.set(bucket, (entry.pending.get(bucket) ?? 0) + 1);
  }

  /** Adds pending counts to this instance's rows, then re-reads the totals. One flush at a time. */
  async flush(): Promise<void> {
    this.flushing ??= this.flushOnce().finally(() => (this.flushing = null));
    return this.flushing;
  }

  private async flushOnce(): Promise<void> {
    const now = Date.now();
    const batch: { entry: Entry; bucket: number; count: number }[] = [];
    for (const [id, entry] of this.entries) {
      if (entry.pending.size === 0 && entry.reserved === 0 && now - entry.lastUsedMs > this.idleMs) {
        this.entries.delete(id);
        continue;
      }
      for (const [bucket, count] of entry.pending) {
        batch.push({ entry, bucket, count });
        entry.inFlight += count;
      }
      entry.pending.clear();
    }
    if (batch.length > 0) {
      try {
        await this.pool.query({
          name: 'retrysafe_quota_flush',
          text: `
INSERT INTO retrysafe.idempotency_key_usage (principal_id, service, scope, bucket_start, instance_id, claims)
SELECT principal_id, $6::text, scope, to_timestamp(bucket_ms / 1000.0), $4::uuid, claims
FROM unnest($1::uuid[], $2::text[], $3::bigint[], $5::int[]) AS t(principal_id, scope, bucket_ms, claims)
ON CONFLICT (principal_id, service, scope, bucket_start, instance_id)
DO UPDATE SET claims = idempotency_key_usage.claims + EXCLUDED.claims`,
          values: [
            batch.map((item) => item.entry.principalId),
            batch.map((item) => item.entry.scope),
            batch.map((item) => item.bucket),
            this.instanceId,
            batch.map((item) => item.count),
            this.service,
          ],
        });
      } catch (error) {
        // Nothing was added: put the counts back for the next flush.
        for (const { entry, bucket, count } of batch) {
          entry.inFlight -= count;
          entry.pending.set(bucket, (entry.pending.get(bucket) ?? 0) + count);
        }
        throw error;
      }
    }
    const active = [...this.entries.values()];
    const flushed = new Map<Entry, number>();
    for (const { entry, count } of batch) flushed.set(entry, (flushed.get(entry) ?? 0) + count);
    if (active.length > 0) await this.refresh(active);
    for (const [entry, count] of flushed) entry.inFlight -= count;
  }

  /** Reads the cluster-wide bucket totals of these entries (primary key prefix principal_id, service, scope). */
  private async refresh(entries: Entry[]): Promise<void> {
    const widest = Math.max(...entries.map((entry) => entry.windowMs)) + this.bucketMs;
    const result = await this.pool.query<{ principal_id: string; scope: string; bucket_ms: string; claims: string }>({
      name: 'retrysafe_quota_totals',
      text: `
SELECT u.principal_id, u.scope, (extract(epoch FROM u.bucket_start) * 1000)::bigint AS bucket_ms, sum(u.claims) AS claims
FROM retrysafe.idempotency_key_usage u
JOIN unnest($1::uuid[], $2::text[]) AS t(principal_id, scope) ON u.principal_id = t.principal_id AND u.service = $4 AND u.scope = t.scope
WHERE u.bucket_start > now() - $3::bigint * interval '1 millisecond'
GROUP BY 1, 2, 3`,
      values: [entries.map((entry) => entry.principalId), entries.map((entry) => entry.scope), widest, this.service],
    });
    const now = Date.now();
    for (const entry of entries) {
      entry.knownTotal = 0;
      entry.oldestBucketMs = null;
    }
    for (const row of result.rows) {
      const entry = this.entries.get(`${row.principal_id}\0${row.scope}`);
      const bucket = Number(row.bucket_ms);
      // A bucket that overlaps the window counts whole: conservative.
      if (!entry || bucket + this.bucketMs <= now - entry.windowMs) continue;
      entry.knownTotal += Number(row.claims);
      entry.oldestBucketMs = entry.oldestBucketMs === null ? bucket : Math.min(entry.oldestBucketMs, bucket);
    }
  }

  private entry(principalId: string, scope: string, windowMs: number): Entry {
    const id = `${principalId}\0${scope}`;
    let entry = this.entries.get(id);
    if (!entry) {
      entry = { principalId, scope, windowMs, knownTotal: 0, oldestBucketMs: null, pending: new Map(), inFlight: 0, reserved: 0, loaded: null, ready: false, lastUsedMs: 0 };
      this.entries.set(id, entry);
    }
    entry.windowMs = windowMs;
    entry.lastUsedMs = Date.now();
    return entry;
  }

  private bucketStart(ms: number): number {
    return Math.floor(ms / this.bucketMs) * this.bucketMs;
  }
}
