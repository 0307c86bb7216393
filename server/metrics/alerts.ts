// Alerts, evaluated from the stored series (store_stats and the flow minute buckets), so
// every instance sees the same ones. Each rule has a named threshold, a duration for which
// the condition must hold on every sample, a severity and a one-line action. Thresholds are
// configuration with defaults (alertThresholds).
import { z } from 'zod';
import type { Queryable } from '@retrysafe/store/postgres';
import { BUCKET_COUNT, percentileOf } from '@retrysafe/store';

export type Severity = 'warning' | 'critical';

export interface AlertThresholds {
  rowsOverBaselineRatio: number;
  rowsOverBaselineMinutes: number;
  cleanupLagSeconds: number;
  staleClaimMinutes: number;
  claimP99ObjectiveMs: number;
  claimP99Minutes: number;
  mismatchShare: number;
  conflictShare: number;
  rateMinutes: number;
  /** Rates are only judged on minutes with at least this many claims. */
  minimumClaimsPerMinute: number;
}

export const alertThresholds: AlertThresholds = {
  rowsOverBaselineRatio: 1.25,
  rowsOverBaselineMinutes: 15,
  cleanupLagSeconds: 3_600,
  staleClaimMinutes: 10,
  claimP99ObjectiveMs: 50,
  claimP99Minutes: 5,
  mismatchShare: 0.05,
  conflictShare: 0.1,
  rateMinutes: 5,
  minimumClaimsPerMinute: 20,
};

/** ALERT_THRESHOLDS: a JSON object overriding any of the defaults, e.g. {"claimP99ObjectiveMs": 30}. */
export const alertThresholdOverrides = z
  .strictObject({
    rowsOverBaselineRatio: z.number().positive(),
    rowsOverBaselineMinutes: z.number().int().positive(),
    cleanupLagSeconds: z.number().positive(),
    staleClaimMinutes: z.number().positive(),
    claimP99ObjectiveMs: z.number().positive(),
    claimP99Minutes: z.number().int().positive(),
    mismatchShare: z.number().min(0).max(1),
    conflictShare: z.number().min(0).max(1),
    rateMinutes: z.number().int().positive(),
    minimumClaimsPerMinute: z.number().int().min(0),
  })
  .partial();

export function thresholdsWith(overrides: z.infer<typeof alertThresholdOverrides> = {}): AlertThresholds {
  return { ...alertThresholds, ...overrides };
}

export interface StoreSamplePoint {
  at: Date;
  estimatedRows: number;
  baselineRows: number;
  cleanupLagSeconds: number;
  /** Oldest stale claim's time past its lease, seconds (0 when none). */
  oldestStaleSeconds: number;
}

export interface FlowMinutePoint {
  at: Date;
  claims: number;
  mismatches: number;
  conflicts: number;
  /** Merged latency histogram of the minute. */
  latency: number[];
}

export interface PolicyPoint {
  endpoint: string;
  retryWindowSeconds: number;
  retentionSeconds: number;
}

export interface Alert {
  name: string;
  severity: Severity;
  summary: string;
  action: string;
  /** Since when the condition holds (the start of the window it held over). */
  since: Date | null;
}

/** True when `points` cover at least the last `minutes` and the condition holds on all of them. */
function heldFor<T extends { at: Date }>(points: T[], now: Date, minutes: number, holds: (point: T) => boolean): Date | null {
  const from = now.getTime() - minutes * 60_000;
  const window = points.filter((point) => point.at.getTime() >= from - 60_000);
  const earliest = window[0];
  if (!earliest || earliest.at.getTime() > from + 60_000) return null; // not enough history
  return window.every(holds) ? earliest.at : null;
}

export function evaluateAlerts(
  input: { now: Date; store: StoreSamplePoint[]; flow: FlowMinutePoint[]; policies: PolicyPoint[] },
  thresholds: AlertThresholds = alertThresholds,
): Alert[] {
  const { now } = input;
  const store = [...input.store].sort((a, b) => a.at.getTime() - b.at.getTime());
  const flow = [...input.flow].sort((a, b) => a.at.getTime() - b.at.getTime());
  const alerts: Alert[] = [];

  for (const policy of input.policies) {
    if (policy.retentionSeconds < policy.retryWindowSeconds) {
      alerts.push({
        name: 'retention_below_window',
        severity: 'critical',
        summary: `${policy.endpoint} keeps keys ${policy.retentionSeconds} s, less than its documented ${policy.retryWindowSeconds} s window`,
        action: 'Raise the retention to at least the window now: late retries are being executed twice.',
        since: null,
      });
    }
  }

  const overBaseline = heldFor(store, now, thresholds.rowsOverBaselineMinutes, (point) => point.baselineRows > 0 && point.estimatedRows > thresholds.rowsOverBaselineRatio * point.baselineRows);
  if (overBaseline) {
    const latest = store.at(-1);
    alerts.push({
      name: 'rows_over_baseline',
      severity: 'warning',
      summary: `The store holds ${latest?.estimatedRows ?? '?'} rows, over ${thresholds.rowsOverBaselineRatio}x its baseline of ${latest?.baselineRows ?? '?'}, for ${thresholds.rowsOverBaselineMinutes} min`,
      action: 'Expiry is not keeping up: check the last sweep runs and the cleanup lag.',
      since: overBaseline,
    });
  }

  const latestStore = store.at(-1);
  if (latestStore && latestStore.cleanupLagSeconds > thresholds.cleanupLagSeconds) {
    alerts.push({
      name: 'cleanup_lag',
      severity: 'warning',
      summary: `The oldest surviving row expired ${Math.round(latestStore.cleanupLagSeconds / 60)} min ago`,
      action: 'The sweeper is behind or not running: look at the last sweep runs and their errors, or run npm run cli -- sweep.',
      since: new Date(latestStore.at.getTime() - latestStore.cleanupLagSeconds * 1000),
    });
  }

  if (latestStore && latestStore.oldestStaleSeconds > thresholds.staleClaimMinutes * 60) {
    alerts.push({
      name: 'stale_claims',
      severity: 'warning',
      summary: `A claim has been past its lease for ${Math.round(latestStore.oldestStaleSeconds / 60)} min`,
      action: 'A handler died mid-work: check whether its effect happened (correlation id), then release the claim.',
      since: new Date(latestStore.at.getTime() - latestStore.oldestStaleSeconds * 1000),
    });
  }

  const busy = (point: FlowMinutePoint) => point.claims >= thresholds.minimumClaimsPerMinute;
  const p99 = (point: FlowMinutePoint) => percentileOf(point.latency, 99);
  const slow = heldFor(flow, now, thresholds.claimP99Minutes, (point) => !busy(point) || p99(point) > thresholds.claimP99ObjectiveMs);
  if (slow && flow.some(busy)) {
    alerts.push({
      name: 'claim_p99',
      severity: 'warning',
      summary: `Claim p99 over its ${thresholds.claimP99ObjectiveMs} ms objective for ${thresholds.claimP99Minutes} min`,
      action: 'The key index may no longer fit in memory, or the database is saturated: check store size and database load.',
      since: slow,
    });
  }

  for (const [name, share, pick, what] of [
    ['mismatch_rate', thresholds.mismatchShare, (point: FlowMinutePoint) => point.mismatches, 'reuse a key for a different request'],
    ['conflict_rate', thresholds.conflictShare, (point: FlowMinutePoint) => point.conflicts, 'retry while the original is still running'],
  ] as const) {
    const since = heldFor(flow, now, thresholds.rateMinutes, (point) => !busy(point) || pick(point) / point.claims > share);
    if (since && flow.some(busy)) {
      alerts.push({
        name,
        severity: 'warning',
        summary: `Over ${Math.round(share * 100)}% of claims for ${thresholds.rateMinutes} min: clients ${what}`,
        action: 'Find the principals involved (key lookup) and tell them; the store is refusing these requests as designed.',
        since,
      });
    }
  }
  return alerts;
}

/** The last `minutes` of the series and the policies, for evaluateAlerts (primary-key ranges). */
export async function readAlertInputs(db: Queryable, minutes = 30): Promise<{ now: Date; store: StoreSamplePoint[]; flow: FlowMinutePoint[]; policies: PolicyPoint[] }> {
  const clock = await db.query<{ now: Date }>('SELECT now() AS now');
  const now = clock.rows[0]?.now ?? new Date();
  const stats = await db.query<{ sampled_at: Date; estimated_rows: string; baseline_rows: string; cleanup_lag_seconds: number }>(
    `SELECT sampled_at, estimated_rows, baseline_rows, cleanup_lag_seconds FROM store_stats
     WHERE sampled_at >= now() - $1::int * interval '1 minute' ORDER BY sampled_at`,
    [minutes],
  );
  // The oldest stale claim now, through the partial index (its lease is the range start).
  const stale = await db.query<{ seconds: number | null }>(
    `SELECT extract(epoch FROM now() - min(lease_expires_at))::float8 AS seconds FROM idempotency_keys
     WHERE state = 'in_progress' AND lease_expires_at < now()`,
  );
  const oldestStale = stale.rows[0]?.seconds ?? 0;
  const counts = await db.query<{ minute: Date; claims: string; mismatches: string | null; conflicts: string | null }>(
    `SELECT minute, sum(count) AS claims, sum(count) FILTER (WHERE outcome = 'mismatch') AS mismatches,
            sum(count) FILTER (WHERE outcome = 'conflict') AS conflicts
     FROM flow_counts_minute WHERE minute >= now() - $1::int * interval '1 minute' GROUP BY minute ORDER BY minute`,
    [minutes],
  );
  const latency = await db.query<{ minute: Date; bucket: number; count: string }>(
    `SELECT minute, bucket, sum(count) AS count FROM claim_latency_minute
     WHERE minute >= now() - $1::int * interval '1 minute' GROUP BY minute, bucket`,
    [minutes],
  );
  const histograms = new Map<number, number[]>();
  for (const row of latency.rows) {
    const buckets = histograms.get(row.minute.getTime()) ?? new Array<number>(BUCKET_COUNT).fill(0);
    buckets[row.bucket] = Number(row.count);
    histograms.set(row.minute.getTime(), buckets);
  }
  const policies = await db.query<{ endpoint: string; retry_window_seconds: number; retention_seconds: number }>(
    'SELECT endpoint, retry_window_seconds, retention_seconds FROM endpoint_policies',
  );
  return {
    now,
    store: stats.rows.map((row, index) => ({
      at: row.sampled_at,
      estimatedRows: Number(row.estimated_rows),
      baselineRows: Number(row.baseline_rows),
      cleanupLagSeconds: row.cleanup_lag_seconds,
      oldestStaleSeconds: index === stats.rows.length - 1 ? Math.max(0, oldestStale) : 0,
    })),
    flow: counts.rows.map((row) => ({
      at: row.minute,
      claims: Number(row.claims),
      mismatches: Number(row.mismatches ?? 0),
      conflicts: Number(row.conflicts ?? 0),
      latency: histograms.get(row.minute.getTime()) ?? new Array<number>(BUCKET_COUNT).fill(0),
    })),
    policies: policies.rows.map((row) => ({ endpoint: row.endpoint, retryWindowSeconds: row.retry_window_seconds, retentionSeconds: row.retention_seconds })),
  };
}
