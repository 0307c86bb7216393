// Alerts, evaluated from the stored series (store_stats and the flow minute buckets), so
// every instance sees the same ones. Each rule has a named threshold, a duration for which
// the condition must hold on every sample, a severity and a one-line action. Thresholds are
// configuration with defaults (alertThresholds).
import { z } from 'zod';
import type { Queryable } from '@retrysafe/store/postgres';
import { ALL, BUCKET_COUNT, percentileOf, SERIES_STEPS } from '@retrysafe/store';
import type { StaleElsewhere, StaleElsewhereReader } from './stale-elsewhere';

/** The overview's one-minute series step (SERIES_STEPS), whose merged levels the idle checks read. */
const IDLE_LATENCY_STEP: (typeof SERIES_STEPS)[number] = 60;
import { readLastFinishedSweep } from '../retention/review';
import { readTogether } from './read-together';
import type { ReplicaLag } from './replica-lag';
import { readIndexMemory, type IndexMemory } from './capacity';

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
  /** Claims refused over a principal's live-key quota (429). */
  rejectedShare: number;
  rateMinutes: number;
  /** Rates are only judged on minutes with at least this many claims. */
  minimumClaimsPerMinute: number;
  /** The sweeper is stalled when no run has finished for this many sweep intervals. */
  sweepStalledIntervals: number;
  /** The dashboard's standby (DASHBOARD_READ_URL) is this far behind the primary (replica-lag.ts). */
  replicaLagSeconds: number;
  /** The key table's unique index over this share of the database's memory (capacity.ts)... */
  indexOverMemoryShare: number;
  /** ...for this long. */
  indexOverMemoryMinutes: number;
  /** Completions that could not be recorded are counted over this window (any of them fires). */
  unrecordedWindowMinutes: number;
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
  // A few 429s are the quota doing its job on one client; 1% of all claims for 5 minutes
  // means a principal (or several) is stuck at its quota and retrying.
  rejectedShare: 0.01,
  rateMinutes: 5,
  minimumClaimsPerMinute: 20,
  // One late run is a slow sweep; three missed intervals mean none is getting through.
  sweepStalledIntervals: 3,
  // The overview refreshes every 30 s by default and a lookup is asked about a key just used:
  // a minute behind shows an incident's last minute wrong.
  replicaLagSeconds: 60,
  // Claim p99 bends once the unique index's random inserts miss memory (the design lesson; docs/sizing.md):
  // warn while a fifth is left. The index grows by the hour, so half an hour over is no blip.
  indexOverMemoryShare: 0.8,
  indexOverMemoryMinutes: 30,
  // One is already a request whose work ran and whose retry after the lease runs it again: any
  // fires; the hour is how long the overview keeps saying so after the last one.
  unrecordedWindowMinutes: 60,
};

/**
 * What each alert is called, how severe it is and what to do: the dashboard's banners and
 * the shipped Prometheus rules (server/metrics/prometheus-rules.ts) use these same words.
 */
export const alertCatalog = {
  retention_below_window: { severity: 'critical', action: 'Raise the retention to at least the window now: late retries are being executed twice.' },
  rows_over_baseline: { severity: 'warning', action: 'Expiry is not keeping up: check the last sweep runs and the cleanup lag.' },
  cleanup_lag: {
    severity: 'warning',
    action:
      'The sweeper is behind or not running: look at the last sweep runs and their errors, or run npm run cli -- sweep. In the partitioned layout a drop also waits while a transaction older than it runs (DETACH ... CONCURRENTLY: a long pg_dump, a session idle in transaction).',
  },
  stale_claims: { severity: 'warning', action: 'A handler died mid-work: check whether its effect happened (correlation id), then release the claim.' },
  claim_p99: {
    severity: 'warning',
    action: 'The key index may no longer fit in memory, or the database is saturated: check store size and database load.',
  },
  mismatch_rate: {
    severity: 'warning',
    what: 'reuse a key for a different request',
    action: 'Find the principals involved (key lookup) and tell them; the store is refusing these requests as designed.',
  },
  conflict_rate: {
    severity: 'warning',
    what: 'retry while the original is still running',
    action: 'Find the principals involved (key lookup) and tell them; the store is refusing these requests as designed.',
  },
  rejection_rate: {
    severity: 'warning',
    what: 'are over their live-key quota (429)',
    action: "Find the principals at their quota (key lookup, their live keys): a client minting a new key per retry, or volume the endpoint's quota was not sized for.",
  },
  sweeper_stalled: {
    severity: 'warning',
    action: 'No sweep is getting through: look for "sweep failed" in the server logs and at the last sweep runs (retention page), or run npm run cli -- sweep.',
  },
  index_over_memory: {
    severity: 'warning',
    action:
      "The key table's unique index is close to the database's memory: once its inserts miss memory, claim p99 bends. Shorten a retention longer than its retry window needs, have clients send time-ordered keys (UUIDv7, ULID), or give the database more memory (DATABASE_MEMORY_BYTES); the day-partitioned layout does not lower it (docs/sizing.md).",
  },
  unrecorded_completions: {
    severity: 'critical',
    action:
      "Work ran whose response could not be recorded: a retry after its lease runs it again. List the keys (Key lookup, Unrecorded completions), check each one's effect by its correlation id before its client retries, and fix what failed the completions (the error class: a lost connection, a pooler, privileges).",
  },
  effects_missing: {
    severity: 'critical',
    action:
      "A Redis-kept service's reconciler found completed keys whose effect is not in the service's database: the client got its answer, and a retry replays it, but the effect is not there. List the keys (Key lookup, Reconciliation), check each by its correlation id, repair the effect or tell its client, and find what lost it (a rollback after the completion, a failover of the service's database).",
  },
  replica_lag: {
    severity: 'warning',
    action:
      "The dashboard reads a standby (DASHBOARD_READ_URL) that is behind: its figures and key lookups are that old. Check the standby's replication (its log, pg_stat_replication on the primary), or unset DASHBOARD_READ_URL to read from the primary.",
  },
} as const satisfies Record<string, { severity: Severity; action: string; what?: string }>;

export type AlertName = keyof typeof alertCatalog;

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
    rejectedShare: z.number().min(0).max(1),
    rateMinutes: z.number().int().positive(),
    minimumClaimsPerMinute: z.number().int().min(0),
    sweepStalledIntervals: z.number().positive(),
    replicaLagSeconds: z.number().positive(),
    indexOverMemoryShare: z.number().positive(),
    indexOverMemoryMinutes: z.number().int().positive(),
    unrecordedWindowMinutes: z.number().int().positive(),
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
  /** Bytes of every index of the key table (store_stats.index_bytes). */
  indexBytes?: number;
}

export interface FlowMinutePoint {
  at: Date;
  claims: number;
  mismatches: number;
  conflicts: number;
  /** Claims refused over the live-key quota. */
  rejections: number;
  /** Merged latency histogram of the minute. */
  latency: number[];
}

export interface PolicyPoint {
  service: string;
  endpoint: string;
  retryWindowSeconds: number;
  retentionSeconds: number;
}

/** The sweeper's last finished run and how often it is meant to run. */
export interface SweepPoint {
  lastFinishedAt: Date | null;
  intervalSeconds: number;
}

export interface AlertInputs {
  now: Date;
  /**
   * The choice readAlertInputs was asked to check (`checksFor`) when it had no claim in the rules'
   * windows: its flow over the whole look-back (`minutes`), with the latency histograms of its
   * last busy minutes, which its checks show instead (server/metrics/checks.ts).
   */
  idleChoice?: { choice: Choice; points: FlowMinutePoint[] };
  store: StoreSamplePoint[];
  /** All scopes together, over the rules' windows. */
  flow: FlowMinutePoint[];
  /** Each service's scopes' own series over the rules' windows (the flow alerts are judged per scope too). */
  flowByScope?: ScopeSeries[];
  policies: PolicyPoint[];
  sweep: SweepPoint;
  /** The dashboard's standby, measured now (readReplicaLag); absent without DASHBOARD_READ_URL. */
  replica?: ReplicaLag;
  /** The key table's unique index and the database's memory, now (capacity.ts). */
  indexMemory?: IndexMemory;
  /** Each service's completions that could not be recorded in the last unrecordedWindowMinutes (every instance's). */
  unrecorded?: UnrecordedCount[];
  /** Each Redis-kept service with a reconciler (a run row): its completed keys whose effect is missing (migration 0027). */
  reconcile?: EffectsMissingCount[];
  /**
   * The stale claims of each service whose keys are kept in Redis or MySQL (read from its backend
   * now, stale-elsewhere.ts); `store` has Postgres's. A backend that did not answer: claims null.
   */
  staleElsewhere?: StaleElsewhere[];
}

const backendNames: Record<StaleElsewhere['backend'], string> = { redis: 'Redis', mysql: 'MySQL' };

/** "orders (Redis)": a kept-elsewhere service as the alerts and checks name it. */
export function keptElsewhereText(reading: Pick<StaleElsewhere, 'service' | 'backend'>): string {
  return `${reading.service} (${backendNames[reading.backend]})`;
}

/** A Redis-kept service's completed keys whose effect its reconciler did not find (reconcile_findings). */
export interface EffectsMissingCount {
  service: string;
  count: number;
  /** When the oldest of them was found (null: none). */
  firstFoundAt: Date | null;
}

/** "1 completed key", "3 completed keys". */
export function completedKeysText(count: number): string {
  return `${count} completed key${count === 1 ? '' : 's'}`;
}

/** A service's completions that could not be recorded in the window (unrecorded_completions, migration 0026). */
export interface UnrecordedCount {
  service: string;
  count: number;
  /** The first and the last in the window. */
  firstAt: Date;
  lastAt: Date;
}

/** "1 completion", "3 completions". */
export function completionsText(count: number): string {
  return `${count} completion${count === 1 ? '' : 's'}`;
}

/** One service's scope's flow, minute by minute. */
export interface ScopeSeries {
  service: string;
  scope: string;
  points: FlowMinutePoint[];
}

export interface Alert {
  name: AlertName;
  severity: Severity;
  /** A flow alert's service; null for a store-wide alert, or a flow alert of all scopes together. */
  service: string | null;
  /** A flow alert's scope; null for a store-wide alert, or a flow alert of all scopes together. */
  scope: string | null;
  /** About the whole store (size, cleanup, stale claims, the sweeper, a policy), not one scope's traffic. */
  storeWide: boolean;
  summary: string;
  action: string;
  /** Since when the condition holds (the start of the window it held over). */
  since: Date | null;
}

/** "hour", "30 min", "2 h": a window as the banners write it. */
export function windowText(minutes: number): string {
  if (minutes === 60) return 'hour';
  return minutes % 60 === 0 ? `${minutes / 60} h` : `${minutes} min`;
}

/** A share as the banners write it: 10%, 5%, 0.5%. */
export function shareText(share: number): string {
  return `${Number((share * 100).toPrecision(3))}%`;
}

/**
 * Since when the condition held: when `points` cover at least the last `minutes`, the condition
 * holds on all of them and (given `needs`) at least one of them meets it; null otherwise.
 */
function heldFor<T extends { at: Date }>(points: T[], now: Date, minutes: number, holds: (point: T) => boolean, needs?: (point: T) => boolean): Date | null {
  const from = now.getTime() - minutes * 60_000;
  const window = points.filter((point) => point.at.getTime() >= from - 60_000);
  const earliest = window[0];
  if (!earliest || earliest.at.getTime() > from + 60_000) return null; // not enough history
  if (needs !== undefined && !window.some(needs)) return null;
  return window.every(holds) ? earliest.at : null;
}

/**
 * Since when the condition has held without a break up to the newest point (Prometheus' pending:
 * true now, not yet for its duration): the start of the newest run of points it holds on, given
 * (with `needs`) that one of them meets it; null when it does not hold now.
 */
function holdingSince<T extends { at: Date }>(points: readonly T[], holds: (point: T) => boolean, needs?: (point: T) => boolean): Date | null {
  let start: T | undefined;
  let needed = needs === undefined;
  for (let i = points.length - 1; i >= 0; i -= 1) {
    const point = points[i];
    if (point === undefined || !holds(point)) break;
    start = point;
    if (needs?.(point)) needed = true;
  }
  return start !== undefined && needed ? start.at : null;
}

/** A rule whose condition holds now but has not yet held for its duration: not an alert, not a pass. */
export interface PendingAlert {
  name: AlertName;
  severity: Severity;
  service: string | null;
  scope: string | null;
  storeWide: boolean;
  /** The start of the run of minutes (or samples) the condition has held on. */
  since: Date;
  /** The rule's duration ("for"). */
  forMinutes: number;
}

/** The rules that must hold for a duration before they fire (the Prometheus rules' `for:`), by name. */
export function forMinutesOf(name: AlertName, thresholds: AlertThresholds): number | null {
  switch (name) {
    case 'rows_over_baseline':
      return thresholds.rowsOverBaselineMinutes;
    case 'claim_p99':
      return thresholds.claimP99Minutes;
    case 'mismatch_rate':
    case 'conflict_rate':
    case 'rejection_rate':
      return thresholds.rateMinutes;
    case 'index_over_memory':
      return thresholds.indexOverMemoryMinutes;
    default:
      return null;
  }
}

/** The flow alerts of one series: one service's scope's, or (of null) all scopes together. */
function flowAlerts(series: FlowMinutePoint[], of: { service: string; scope: string } | null, now: Date, thresholds: AlertThresholds, pending: PendingAlert[] = []): Alert[] {
  const flow = [...series].sort((a, b) => a.at.getTime() - b.at.getTime());
  const where = of === null ? '' : `${of.scope} (${of.service}): `;
  const service = of?.service ?? null;
  const scope = of?.scope ?? null;
  const alerts: Alert[] = [];
  const busy = (point: FlowMinutePoint) => point.claims >= thresholds.minimumClaimsPerMinute;
  const p99 = (point: FlowMinutePoint) => percentileOf(point.latency, 99);
  // Minutes under the claims floor are not judged, and a window of them alone is not judged at
  // all (a scope whose traffic dwindled is not in trouble): each rule needs a busy minute in it.
  const slowHolds = (point: FlowMinutePoint) => !busy(point) || p99(point) > thresholds.claimP99ObjectiveMs;
  const slow = heldFor(flow, now, thresholds.claimP99Minutes, slowHolds, busy);
  const slowSince = slow ? null : holdingSince(flow, slowHolds, busy);
  if (slowSince) pending.push({ name: 'claim_p99', service, scope, storeWide: false, severity: alertCatalog.claim_p99.severity, since: slowSince, forMinutes: thresholds.claimP99Minutes });
  if (slow) {
    alerts.push({
      name: 'claim_p99',
      service,
      scope,
      storeWide: false,
      severity: alertCatalog.claim_p99.severity,
      summary: `${where}Claim p99 over its ${thresholds.claimP99ObjectiveMs} ms objective for ${thresholds.claimP99Minutes} min`,
      action: alertCatalog.claim_p99.action,
      since: slow,
    });
  }

  for (const [name, share, pick, who] of [
    ['mismatch_rate', thresholds.mismatchShare, (point: FlowMinutePoint) => point.mismatches, 'clients'],
    ['conflict_rate', thresholds.conflictShare, (point: FlowMinutePoint) => point.conflicts, 'clients'],
    ['rejection_rate', thresholds.rejectedShare, (point: FlowMinutePoint) => point.rejections, 'principals'],
  ] as const) {
    const holds = (point: FlowMinutePoint) => !busy(point) || pick(point) / point.claims > share;
    const since = heldFor(flow, now, thresholds.rateMinutes, holds, busy);
    const pendingSince = since ? null : holdingSince(flow, holds, busy);
    if (pendingSince) pending.push({ name, service, scope, storeWide: false, severity: alertCatalog[name].severity, since: pendingSince, forMinutes: thresholds.rateMinutes });
    if (since) {
      alerts.push({
        name,
        service,
        scope,
        storeWide: false,
        severity: alertCatalog[name].severity,
        summary: `${where}Over ${shareText(share)} of claims for ${thresholds.rateMinutes} min: ${who} ${alertCatalog[name].what}`,
        action: alertCatalog[name].action,
        since,
      });
    }
  }
  return alerts;
}

export function evaluateAlerts(input: AlertInputs, thresholds: AlertThresholds = alertThresholds): Alert[] {
  return evaluateAlertStates(input, thresholds).firing;
}

/**
 * Every rule's state (Prometheus' Normal, Pending, Firing): the firing alerts, and the rules
 * whose condition holds now without having held for their duration yet (pending). A rule not
 * in either is ok.
 */
export function evaluateAlertStates(input: AlertInputs, thresholds: AlertThresholds = alertThresholds): { firing: Alert[]; pending: PendingAlert[] } {
  const { now } = input;
  const pending: PendingAlert[] = [];
  const store = [...input.store].sort((a, b) => a.at.getTime() - b.at.getTime());
  const flow = [...input.flow].sort((a, b) => a.at.getTime() - b.at.getTime());
  const alerts: Alert[] = [];

  for (const policy of input.policies) {
    if (policy.retentionSeconds < policy.retryWindowSeconds) {
      alerts.push({
        name: 'retention_below_window',
        service: null,
        scope: null,
        storeWide: true,
        severity: alertCatalog.retention_below_window.severity,
        summary: `${policy.endpoint} (${policy.service}) keeps keys ${policy.retentionSeconds} s, less than its documented ${policy.retryWindowSeconds} s window`,
        action: alertCatalog.retention_below_window.action,
        since: null,
      });
    }
  }

  const overBaselineHolds = (point: StoreSamplePoint) => point.baselineRows > 0 && point.estimatedRows > thresholds.rowsOverBaselineRatio * point.baselineRows;
  const overBaseline = heldFor(store, now, thresholds.rowsOverBaselineMinutes, overBaselineHolds);
  const overBaselineSince = overBaseline ? null : holdingSince(store, overBaselineHolds);
  if (overBaselineSince) {
    pending.push({
      name: 'rows_over_baseline',
      service: null,
      scope: null,
      storeWide: true,
      severity: alertCatalog.rows_over_baseline.severity,
      since: overBaselineSince,
      forMinutes: thresholds.rowsOverBaselineMinutes,
    });
  }
  if (overBaseline) {
    const latest = store.at(-1);
    alerts.push({
      name: 'rows_over_baseline',
      service: null,
      scope: null,
      storeWide: true,
      severity: alertCatalog.rows_over_baseline.severity,
      summary: `The store holds ${latest?.estimatedRows ?? '?'} rows, over ${thresholds.rowsOverBaselineRatio}x its baseline of ${latest?.baselineRows ?? '?'}, for ${thresholds.rowsOverBaselineMinutes} min`,
      action: alertCatalog.rows_over_baseline.action,
      since: overBaseline,
    });
  }

  const latestStore = store.at(-1);
  if (latestStore && latestStore.cleanupLagSeconds > thresholds.cleanupLagSeconds) {
    alerts.push({
      name: 'cleanup_lag',
      service: null,
      scope: null,
      storeWide: true,
      severity: alertCatalog.cleanup_lag.severity,
      summary: `The cleanup is ${Math.round(latestStore.cleanupLagSeconds / 60)} min behind (the oldest row past its expiry; in the partitioned layout the oldest partition past its end, or the walk of keys promised less than a day)`,
      action: alertCatalog.cleanup_lag.action,
      since: new Date(latestStore.at.getTime() - latestStore.cleanupLagSeconds * 1000),
    });
  }

  if (latestStore && latestStore.oldestStaleSeconds > thresholds.staleClaimMinutes * 60) {
    alerts.push({
      name: 'stale_claims',
      service: null,
      scope: null,
      storeWide: true,
      severity: alertCatalog.stale_claims.severity,
      summary: `A claim has been past its lease for ${Math.round(latestStore.oldestStaleSeconds / 60)} min`,
      action: alertCatalog.stale_claims.action,
      since: new Date(latestStore.at.getTime() - latestStore.oldestStaleSeconds * 1000),
    });
  }
  // A service kept in Redis or MySQL, judged on its backend's own stale claims; one whose backend
  // did not answer fires too (its claims are not known: never a silent pass).
  for (const reading of input.staleElsewhere ?? []) {
    const oldest = reading.claims?.oldestPastLeaseSeconds ?? 0;
    if (reading.claims !== null && oldest <= thresholds.staleClaimMinutes * 60) continue;
    alerts.push({
      name: 'stale_claims',
      service: reading.service,
      scope: null,
      storeWide: false,
      severity: alertCatalog.stale_claims.severity,
      summary:
        reading.claims === null
          ? `The stale claims of ${keptElsewhereText(reading)} could not be read: its key backend did not answer`
          : `A claim of ${keptElsewhereText(reading)} has been past its lease for ${Math.round(oldest / 60)} min`,
      action:
        reading.claims === null
          ? `Check that ${backendNames[reading.backend]} answers the server (${reading.backend === 'redis' ? 'DASHBOARD_KEYS_REDIS' : 'DASHBOARD_KEYS_MYSQL'}): until it does, its claims past their lease are not known.`
          : reading.backend === 'redis'
            ? 'A handler died mid-work: check whether its effect happened (correlation id); the next retry takes the claim over.'
            : "A handler died mid-work: check whether its effect happened (correlation id); the service's sweepMysql releases the claim, or the next retry takes it over.",
      since: reading.claims === null ? null : new Date(input.now.getTime() - oldest * 1000),
    });
  }

  // Flow alerts per scope, so one scope's trouble shows however busy and healthy the others
  // are; all scopes together only where no single scope explains it (e.g. each scope under
  // the minimum-claims floor, together over it).
  const scopesPending: PendingAlert[] = [];
  const perScope = [...(input.flowByScope ?? [])]
    .sort((a, b) => a.service.localeCompare(b.service) || a.scope.localeCompare(b.scope))
    .flatMap((series) => flowAlerts(series.points, series, now, thresholds, scopesPending));
  const named = new Set(perScope.map((alert) => alert.name));
  const togetherPending: PendingAlert[] = [];
  const together = flowAlerts(flow, null, now, thresholds, togetherPending);
  alerts.push(...together.filter((alert) => !named.has(alert.name)), ...perScope);
  // All scopes together pend only where no scope fires, pends or explains it, as they fire.
  const namedOrPending = new Set([...perScope, ...together, ...scopesPending].map((alert) => alert.name));
  pending.push(...togetherPending.filter((alert) => !namedOrPending.has(alert.name)), ...scopesPending);

  const { lastFinishedAt, intervalSeconds } = input.sweep;
  const stalledAfterMs = thresholds.sweepStalledIntervals * intervalSeconds * 1000;
  if (lastFinishedAt && now.getTime() - lastFinishedAt.getTime() > stalledAfterMs) {
    alerts.push({
      name: 'sweeper_stalled',
      service: null,
      scope: null,
      storeWide: true,
      severity: alertCatalog.sweeper_stalled.severity,
      summary: `No sweep has finished for ${Math.round((now.getTime() - lastFinishedAt.getTime()) / 60_000)} min, over ${thresholds.sweepStalledIntervals} sweep intervals of ${intervalSeconds} s`,
      action: alertCatalog.sweeper_stalled.action,
      since: new Date(lastFinishedAt.getTime() + stalledAfterMs),
    });
  }

  // The unique index against memory: now from the catalog; for how long from the store samples,
  // whose index bytes (every index of the table) are scaled by the unique index's share of them now.
  const memory = input.indexMemory;
  if (memory && memory.memoryBytes > 0 && memory.uniqueIndexBytes > thresholds.indexOverMemoryShare * memory.memoryBytes) {
    const uniqueShare = memory.allIndexBytes > 0 ? memory.uniqueIndexBytes / memory.allIndexBytes : 1;
    const overHolds = (point: StoreSamplePoint) => point.indexBytes !== undefined && point.indexBytes * uniqueShare > thresholds.indexOverMemoryShare * memory.memoryBytes;
    const over = heldFor(store, now, thresholds.indexOverMemoryMinutes, overHolds);
    const share = `${Math.round((memory.uniqueIndexBytes / memory.memoryBytes) * 100)}%`;
    if (over) {
      alerts.push({
        name: 'index_over_memory',
        service: null,
        scope: null,
        storeWide: true,
        severity: alertCatalog.index_over_memory.severity,
        summary: `The key table's unique index is ${share} of the database's memory (${memory.memorySource}), over ${shareText(thresholds.indexOverMemoryShare)} for ${thresholds.indexOverMemoryMinutes} min`,
        action: alertCatalog.index_over_memory.action,
        since: over,
      });
    } else {
      pending.push({
        name: 'index_over_memory',
        service: null,
        scope: null,
        storeWide: true,
        severity: alertCatalog.index_over_memory.severity,
        since: holdingSince(store, overHolds) ?? now,
        forMinutes: thresholds.indexOverMemoryMinutes,
      });
    }
  }

  // Any completion that could not be recorded, per service: its work ran and a retry runs it again.
  for (const unrecorded of [...(input.unrecorded ?? [])].sort((a, b) => a.service.localeCompare(b.service))) {
    if (unrecorded.count <= 0) continue;
    alerts.push({
      name: 'unrecorded_completions',
      service: unrecorded.service,
      scope: null,
      storeWide: false,
      severity: alertCatalog.unrecorded_completions.severity,
      summary: `${unrecorded.service}: ${completionsText(unrecorded.count)} could not be recorded in the last ${windowText(thresholds.unrecordedWindowMinutes)}: the work ran, and a retry after the lease runs it again`,
      action: alertCatalog.unrecorded_completions.action,
      since: unrecorded.firstAt,
    });
  }

  // Any completed key whose effect is missing, per Redis-kept service (its reconciler's findings).
  for (const missing of [...(input.reconcile ?? [])].sort((a, b) => a.service.localeCompare(b.service))) {
    if (missing.count <= 0) continue;
    alerts.push({
      name: 'effects_missing',
      service: missing.service,
      scope: null,
      storeWide: false,
      severity: alertCatalog.effects_missing.severity,
      summary: `${missing.service}: ${completedKeysText(missing.count)} whose effect is missing from the service's database`,
      action: alertCatalog.effects_missing.action,
      since: missing.firstFoundAt ?? input.now,
    });
  }

  const replica = input.replica;
  if (replica && (!replica.inRecovery || (replica.seconds ?? 0) > thresholds.replicaLagSeconds)) {
    alerts.push({
      name: 'replica_lag',
      service: null,
      scope: null,
      storeWide: true,
      severity: alertCatalog.replica_lag.severity,
      summary: replica.inRecovery
        ? `The dashboard's standby is ${Math.round(replica.seconds ?? 0)} s behind the primary (${replica.bytes ?? '?'} bytes of WAL to replay${replica.replayPaused ? ', replay paused' : ''}), over ${thresholds.replicaLagSeconds} s`
        : "The dashboard's standby is no longer in recovery (promoted?): its reads no longer follow the primary",
      action: alertCatalog.replica_lag.action,
      since: replica.inRecovery ? new Date(replica.measuredAt.getTime() - (replica.seconds ?? 0) * 1000) : null,
    });
  }
  return { firing: alerts, pending };
}

/**
 * The latency histograms readAlertInputs reads, each (minute, service, scope)'s as two arrays (its
 * buckets and their counts): one row per scope and minute rather than one per latency bucket, which
 * at 50 scopes was most of the time this read took (the rows, not the index range, cost). JSON
 * arrays, which the client parses natively (a Postgres array is parsed character by character).
 * Only the minutes a histogram is used in: every scope's last `recentMinutes` here (a range of the
 * primary key, which leads with minute); older ones only for an idle checked choice
 * (alertIdleLatencyText). $1 now, $2 the windows' minutes, $3 recentMinutes. "minute < 'infinity'"
 * holds for every row: it makes the condition a two-sided range, which a planner without
 * statistics (a young table) takes for a small share of the rows and serves by the index rather
 * than by a Seq Scan.
 */
export const alertLatencyText = `SELECT minute, service, scope, json_agg(bucket) AS buckets, json_agg(count) AS counts FROM claim_latency_minute
     WHERE minute >= $1::timestamptz - least($2::int, $3::int) * interval '1 minute' AND minute < 'infinity'
     GROUP BY minute, service, scope`;

/**
 * The merged latency histograms of a choice's last busy minutes (an idle choice's p99 check shows
 * them: lastBusyMinutes), from the overview's one-minute series (migration 0021), which the flush
 * writes merged for each scope, each service and the store: $1 the level's services (the store's
 * '*', the service, or each service that has the chosen scope), $2 its scope ('*' or the scope),
 * $3 the minutes. One probe of the series' primary key on (step, service, scope, minute) for each
 * service and minute: a LATERAL aggregate, which the planner cannot flatten into a join or turn
 * into a range with the lists as filters (PostgreSQL 15 did, on a young table). At most
 * (minutes x services) probes, however many scopes a service or the store has.
 */
export const alertIdleLatencyText = `SELECT m.minute, h.buckets, h.counts
     FROM unnest($1::text[]) AS v(service)
     CROSS JOIN unnest($3::timestamptz[]) AS m(minute)
     CROSS JOIN LATERAL (
       SELECT json_agg(l.bucket) AS buckets, json_agg(l.count) AS counts FROM claim_latency_series l
       WHERE l.step = ${IDLE_LATENCY_STEP} AND l.service = v.service AND l.scope = $2 AND l.at = m.minute
     ) AS h
     WHERE h.buckets IS NOT NULL`;

/**
 * A choice's last busy minutes, newest first: at most `minutes` of them, each with at least
 * minimumClaimsPerMinute claims (and at least one). An idle choice's checks show these
 * (server/metrics/checks.ts), so they are the older histograms readAlertInputs reads.
 */
export function lastBusyMinutes<T extends { at: Date; claims: number }>(points: readonly T[], thresholds: AlertThresholds, minutes: number): T[] {
  return points
    .filter((point) => point.claims >= Math.max(1, thresholds.minimumClaimsPerMinute))
    .sort((a, b) => b.at.getTime() - a.at.getTime())
    .slice(0, minutes);
}

/**
 * Each service's completions that could not be recorded since $1 (null: now) minus $2 minutes
 * (every instance's, as their flushes wrote them): a range of unrecorded_completions_at_idx (at,
 * service), read from the index alone. (On 'infinity', see alertLatencyText.)
 */
export const alertUnrecordedText = `SELECT service, count(*)::int AS n, min(at) AS first_at, max(at) AS last_at FROM unrecorded_completions
     WHERE at >= coalesce($1::timestamptz, now()) - $2::int * interval '1 minute' AND at < 'infinity'
     GROUP BY service`;

/** Each service's completions that could not be recorded in the `minutes` before `now` (the database's clock when null). */
export async function readUnrecordedCounts(db: Queryable, now: Date | null, minutes: number): Promise<UnrecordedCount[]> {
  const { rows } = await db.query<{ service: string; n: number; first_at: Date; last_at: Date }>({ name: 'alert_unrecorded', text: alertUnrecordedText, values: [now, minutes] });
  return rows.map((row) => ({ service: row.service, count: row.n, firstAt: row.first_at, lastAt: row.last_at }));
}

/**
 * Each service whose reconciler has run (reconcile_runs, one row a service) with its completed keys
 * whose effect is missing: a scan of reconcile_findings, which each service keeps bounded
 * (maxFindings, default 1,000 rows).
 */
export const alertEffectsMissingText = `SELECT r.service, coalesce(f.n, 0)::int AS n, f.first_found_at FROM reconcile_runs r
     LEFT JOIN (SELECT service, count(*) AS n, min(found_at) AS first_found_at FROM reconcile_findings WHERE kind = 'effect_missing' GROUP BY service) f USING (service)
     ORDER BY r.service`;

export async function readEffectsMissingCounts(db: Queryable): Promise<EffectsMissingCount[]> {
  const { rows } = await db.query<{ service: string; n: number; first_found_at: Date | null }>({ name: 'alert_effects_missing', text: alertEffectsMissingText });
  return rows.map((row) => ({ service: row.service, count: row.n, firstFoundAt: row.first_found_at }));
}

/** A choice of the overview: a service, a scope (in every service that has it), both, or neither (the store). */
export interface Choice {
  service?: string | undefined;
  scope?: string | undefined;
}

/**
 * Per minute, service and scope, the claims and the outcomes the flow rules judge: a range of the
 * primary key (which leads with minute) over the rules' windows. All scopes are their sum. $1 now,
 * $2 the minutes. Unordered, so the groups are hashed rather than the rows sorted (half this
 * statement's time at 50 scopes); readAlertInputs orders them. (On 'infinity', see
 * alertLatencyText.)
 */
export const alertCountsText = `SELECT minute, service, scope, sum(count) AS claims, sum(count) FILTER (WHERE outcome = 'mismatch') AS mismatches,
            sum(count) FILTER (WHERE outcome = 'conflict') AS conflicts, sum(count) FILTER (WHERE outcome = 'rejected') AS rejections
     FROM flow_counts_minute WHERE minute >= $1::timestamptz - $2::int * interval '1 minute' AND minute < 'infinity'
     GROUP BY minute, service, scope`;

/**
 * A checked choice's flow per minute and service over the whole look-back, read only when the
 * choice was idle in the rules' windows: the same range of flow_counts_minute's primary key, with
 * the chosen service and scope as conditions inside it (the key's next columns), so only the
 * choice's rows leave the index. $1 now, $2 the minutes, then the service and the scope as chosen.
 */
export function alertChoiceFlowText(choice: Choice): string {
  const where = ["minute >= $1::timestamptz - $2::int * interval '1 minute'", "minute < 'infinity'"];
  if (choice.service !== undefined) where.push(`service = $${where.length + 1}`);
  if (choice.scope !== undefined) where.push(`scope = $${choice.service !== undefined ? 4 : 3}`);
  return `SELECT minute, service, sum(count) AS claims, sum(count) FILTER (WHERE outcome = 'mismatch') AS mismatches,
            sum(count) FILTER (WHERE outcome = 'conflict') AS conflicts, sum(count) FILTER (WHERE outcome = 'rejected') AS rejections
     FROM flow_counts_minute WHERE ${where.join(' AND ')}
     GROUP BY minute, service`;
}

/**
 * The rules' windows and the store's last `minutes` (store_stats), the policies and the last
 * finished sweep, for evaluateAlerts and evaluateChecks (primary-key ranges). The flow is read
 * per scope over the rules' windows only (the longer of rateMinutes and claimP99Minutes, and the
 * minute before it that a rule accepts as its start), so the rows read are bounded by the
 * windows, not the look-back; only the checked choice (`checksFor`), when idle in them, is read
 * over the whole `minutes` (readIdleChoice). `sweepIntervalSeconds` is the server's
 * SWEEP_INTERVAL_SECONDS (its default when not given); `thresholds` the ones the alerts are
 * judged by; `now` the caller's clock read from the database (read here when not given), and
 * `lastSweep` its read of the last finished sweep (read here when not given).
 */
export async function readAlertInputs(
  db: Queryable,
  options: {
    minutes?: number;
    sweepIntervalSeconds?: number;
    thresholds?: AlertThresholds;
    checksFor?: Choice;
    now?: Date;
    /** The last finished sweep, when the caller reads it too (readLastFinishedSweep). */
    lastSweep?: () => Promise<{ finishedAt: Date } | null>;
    /** The dashboard's standby's lag (readReplicaLag), when it reads one (DASHBOARD_READ_URL); undefined: not read. */
    replicaLag?: () => Promise<ReplicaLag | undefined>;
    /** DATABASE_MEMORY_BYTES, when the operator set it (else shared_buffers is the memory). */
    databaseMemoryBytes?: number | undefined;
    /** The stale claims of the services kept in Redis or MySQL (staleElsewhereReader), when there are such services. */
    staleElsewhere?: StaleElsewhereReader | undefined;
  } = {},
): Promise<AlertInputs> {
  const { minutes = 30, sweepIntervalSeconds = 60, thresholds = alertThresholds, checksFor } = options;
  const now = options.now ?? (await db.query<{ now: Date }>('SELECT now() AS now')).rows[0]?.now ?? new Date();
  const windowMinutes = Math.min(minutes, Math.max(thresholds.rateMinutes, thresholds.claimP99Minutes) + 1);
  // A histogram is used by the p99 rule over its window (claimP99Minutes, and the minute before
  // it) and by the checks' p99 over the same minutes; only the checked choice, when idle in
  // them, shows its last busy minutes instead (readIdleChoice).
  const recentMinutes = thresholds.claimP99Minutes + 1;
  type LatencyRow = { minute: Date; service: string; scope: string; buckets: number[]; counts: number[] };
  // Independent reads, at once on a pool (readTogether); named (prepared once per connection),
  // except the store samples' one-sided range, whose custom plan reads the table's statistics.
  const [stats, stale, counts, latency, policies, lastSweep, replica, indexMemory, unrecorded, reconcile, staleElsewhere] = await readTogether(db, [
    () =>
      db.query<{ sampled_at: Date; estimated_rows: string; baseline_rows: string; cleanup_lag_seconds: number; index_bytes: string }>(
        `SELECT sampled_at, estimated_rows, baseline_rows, cleanup_lag_seconds, index_bytes FROM store_stats
         WHERE sampled_at >= now() - $1::int * interval '1 minute' ORDER BY sampled_at`,
        [minutes],
      ),
    // The oldest stale claim now, through the partial index (its lease is the range start).
    () =>
      db.query<{ seconds: number | null }>({
        name: 'alert_oldest_stale',
        text: `SELECT extract(epoch FROM now() - min(lease_expires_at))::float8 AS seconds FROM idempotency_keys
               WHERE state = 'in_progress' AND lease_expires_at < now()`,
      }),
    () => db.query<CountsRow & { scope: string }>({ name: 'alert_counts', text: alertCountsText, values: [now, windowMinutes] }),
    () => db.query<LatencyRow>({ name: 'alert_latency', text: alertLatencyText, values: [now, windowMinutes, recentMinutes] }),
    () =>
      db.query<{ service: string; endpoint: string; retry_window_seconds: number; retention_seconds: number }>({
        name: 'alert_policies',
        text: 'SELECT service, endpoint, retry_window_seconds, retention_seconds FROM endpoint_policies',
      }),
    options.lastSweep ?? (() => readLastFinishedSweep(db)),
    options.replicaLag ?? (() => Promise.resolve(undefined)),
    () => readIndexMemory(db, options.databaseMemoryBytes),
    () => readUnrecordedCounts(db, now, thresholds.unrecordedWindowMinutes),
    () => readEffectsMissingCounts(db),
    // Their backends', not this pool's: at most its budget (a backend that does not answer is null).
    options.staleElsewhere ?? (() => Promise.resolve(undefined)),
  ]);
  const oldestStale = stale.rows[0]?.seconds ?? 0;
  const idleChoice = checksFor === undefined ? undefined : await readIdleChoice(db, checksFor, counts.rows, thresholds, now, minutes);
  const histograms = new Map<string, number[]>();
  for (const row of latency.rows) {
    for (const key of [`${row.minute.getTime()}`, `${row.minute.getTime()}\0${row.service}\0${row.scope}`]) {
      const buckets = histograms.get(key) ?? emptyHistogram();
      addCells(buckets, row.buckets, row.counts);
      histograms.set(key, buckets);
    }
  }
  const overall = new Map<number, FlowMinutePoint>();
  const flowByScope = new Map<string, ScopeSeries>();
  for (const row of [...counts.rows].sort((a, b) => a.minute.getTime() - b.minute.getTime())) {
    const at = row.minute.getTime();
    const point: FlowMinutePoint = { ...pointOf(row), latency: histograms.get(`${at}\0${row.service}\0${row.scope}`) ?? emptyHistogram() };
    const id = `${row.service}\0${row.scope}`;
    const series = flowByScope.get(id) ?? { service: row.service, scope: row.scope, points: [] };
    series.points.push(point);
    flowByScope.set(id, series);
    const sum = overall.get(at) ?? { at: row.minute, claims: 0, mismatches: 0, conflicts: 0, rejections: 0, latency: histograms.get(`${at}`) ?? emptyHistogram() };
    addCounts(sum, point);
    overall.set(at, sum);
  }
  return {
    now,
    ...(idleChoice === undefined ? {} : { idleChoice }),
    store: stats.rows.map((row, index) => ({
      at: row.sampled_at,
      estimatedRows: Number(row.estimated_rows),
      baselineRows: Number(row.baseline_rows),
      cleanupLagSeconds: row.cleanup_lag_seconds,
      indexBytes: Number(row.index_bytes),
      oldestStaleSeconds: index === stats.rows.length - 1 ? Math.max(0, oldestStale) : 0,
    })),
    flow: [...overall.values()],
    flowByScope: [...flowByScope.values()],
    policies: policies.rows.map((row) => ({ service: row.service, endpoint: row.endpoint, retryWindowSeconds: row.retry_window_seconds, retentionSeconds: row.retention_seconds })),
    sweep: { lastFinishedAt: lastSweep?.finishedAt ?? null, intervalSeconds: sweepIntervalSeconds },
    ...(replica === undefined ? {} : { replica }),
    indexMemory,
    unrecorded,
    reconcile,
    ...(staleElsewhere === undefined ? {} : { staleElsewhere }),
  };
}

type CountsRow = { minute: Date; service: string; claims: string; mismatches: string | null; conflicts: string | null; rejections: string | null };

const emptyHistogram = () => new Array<number>(BUCKET_COUNT).fill(0);

/** Adds a histogram's cells (bucket numbers and their counts, as read) to `histogram`. */
function addCells(histogram: number[], buckets: readonly number[], counts: readonly number[]): void {
  buckets.forEach((bucket, i) => (histogram[bucket] = (histogram[bucket] ?? 0) + (counts[i] ?? 0)));
}

function pointOf(row: CountsRow): Omit<FlowMinutePoint, 'latency'> {
  return { at: row.minute, claims: Number(row.claims), mismatches: Number(row.mismatches ?? 0), conflicts: Number(row.conflicts ?? 0), rejections: Number(row.rejections ?? 0) };
}

function addCounts(sum: FlowMinutePoint, point: Omit<FlowMinutePoint, 'latency'>): void {
  sum.claims += point.claims;
  sum.mismatches += point.mismatches;
  sum.conflicts += point.conflicts;
  sum.rejections += point.rejections;
}

/**
 * The idle choice's flow (AlertInputs.idleChoice): when the choice had no claim in the shorter of
 * the rules' windows, its checks show its last busy minutes (lastBusyMinutes), which may be
 * anywhere in the look-back: its flow per minute over `minutes` (alertChoiceFlowText), then the
 * merged histograms of its last busy minutes from the one-minute series at its level
 * (alertIdleLatencyText). Nothing is read for a choice with claims in the windows.
 */
async function readIdleChoice(
  db: Queryable,
  choice: Choice,
  windowRows: readonly { minute: Date; service: string; scope: string; claims: string }[],
  thresholds: AlertThresholds,
  now: Date,
  minutes: number,
): Promise<{ choice: Choice; points: FlowMinutePoint[] } | undefined> {
  const idleFrom = now.getTime() - Math.min(thresholds.rateMinutes, thresholds.claimP99Minutes) * 60_000;
  const chosen = (row: { service: string; scope: string }) => (choice.service === undefined || row.service === choice.service) && (choice.scope === undefined || row.scope === choice.scope);
  if (windowRows.some((row) => chosen(row) && row.minute.getTime() >= idleFrom && Number(row.claims) > 0)) return undefined;
  const given = [choice.service, choice.scope].filter((value): value is string => value !== undefined);
  const { rows } = await db.query<CountsRow>({
    name: `alert_choice_flow_${choice.service === undefined ? '' : 'service'}_${choice.scope === undefined ? '' : 'scope'}`,
    text: alertChoiceFlowText(choice),
    values: [now, minutes, ...given],
  });
  const byMinute = new Map<number, FlowMinutePoint>();
  for (const row of rows) {
    const point = byMinute.get(row.minute.getTime()) ?? { at: row.minute, claims: 0, mismatches: 0, conflicts: 0, rejections: 0, latency: emptyHistogram() };
    addCounts(point, pointOf(row));
    byMinute.set(row.minute.getTime(), point);
  }
  const points = [...byMinute.values()].sort((a, b) => a.at.getTime() - b.at.getTime());
  const busy = lastBusyMinutes(points, thresholds, thresholds.claimP99Minutes);
  if (busy.length > 0) {
    const services = choice.service !== undefined ? [choice.service] : choice.scope !== undefined ? [...new Set(rows.map((row) => row.service))].sort() : [ALL];
    const { rows: cells } = await db.query<{ minute: Date; buckets: number[]; counts: number[] }>({
      name: 'alert_idle_latency',
      text: alertIdleLatencyText,
      values: [services, choice.scope ?? ALL, busy.map((minute) => minute.at).sort((a, b) => a.getTime() - b.getTime())],
    });
    for (const cell of cells) {
      const point = byMinute.get(cell.minute.getTime());
      if (point) addCells(point.latency, cell.buckets, cell.counts);
    }
  }
  return { choice: { service: choice.service, scope: choice.scope }, points };
}
