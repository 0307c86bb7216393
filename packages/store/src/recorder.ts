// The flow recorder: the store's FlowObserver. record() only touches memory (no database
// round trip on the request path); every few seconds flush() adds what accumulated to the
// shared minute buckets in one statement, so the stored figures are the sum over all
// instances. A crash loses at most what accumulated since the last flush.
import type pg from 'pg';
import type { ClaimOutcome, FlowEvent, FlowObserver } from './events.js';
import { BUCKET_COUNT, bucketOf } from './histogram.js';
import { periodicTask, type PeriodicTask } from './periodic.js';

interface Pending {
  counts: Map<string, { minute: number; service: string; scope: string; outcome: ClaimOutcome; count: number }>;
  latency: Map<string, { minute: number; service: string; scope: string; buckets: Uint32Array }>;
}

const empty = (): Pending => ({ counts: new Map(), latency: new Map() });

export interface RecorderOptions {
  flushIntervalMs?: number;
  onError?: (error: unknown) => void;
  now?: () => number;
}

export class FlowRecorder implements FlowObserver {
  private pending: Pending = empty();
  private readonly task: PeriodicTask;
  private flushing: Promise<void> | null = null;
  private readonly now: () => number;

  constructor(
    private readonly pool: pg.Pool,
    private readonly options: RecorderOptions = {},
  ) {
    this.now = options.now ?? Date.now;
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
    if (batch.counts.size === 0 && batch.latency.size === 0) return;
    const counts = [...batch.counts.values()];
    const cells: { minute: number; service: string; scope: string; bucket: number; count: number }[] = [];
    for (const histogram of batch.latency.values()) {
      histogram.buckets.forEach((count, bucket) => {
        if (count > 0) cells.push({ minute: histogram.minute, service: histogram.service, scope: histogram.scope, bucket, count });
      });
    }
    try {
      await this.pool.query({
        name: 'metrics_flush',
        text: `
WITH counted AS (
  INSERT INTO retrysafe.flow_counts_minute (minute, service, scope, outcome, count)
  SELECT to_timestamp(m / 1000.0), v, s, o, c FROM unnest($1::bigint[], $9::text[], $2::text[], $3::text[], $4::bigint[]) AS t(m, v, s, o, c)
  ORDER BY 1, 2, 3, 4
  ON CONFLICT (minute, service, scope, outcome) DO UPDATE SET count = flow_counts_minute.count + EXCLUDED.count
)
INSERT INTO retrysafe.claim_latency_minute (minute, service, scope, bucket, count)
SELECT to_timestamp(m / 1000.0), v, s, b, c FROM unnest($5::bigint[], $10::text[], $6::text[], $7::smallint[], $8::bigint[]) AS t(m, v, s, b, c)
ORDER BY 1, 2, 3, 4
ON CONFLICT (minute, service, scope, bucket) DO UPDATE SET count = claim_latency_minute.count + EXCLUDED.count`,
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
        ],
      });
    } catch (error) {
      this.merge(batch); // nothing was written: keep the counts for the next flush
      throw error;
    }
  }

  private merge(batch: Pending): void {
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

/** Fans one event out to several observers (e.g. the recorder and the Prometheus counters). */
export function observeAll(...observers: FlowObserver[]): FlowObserver {
  return { record: (event) => observers.forEach((observer) => observer.record(event)) };
}
