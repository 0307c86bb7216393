// The overview's checks (pghero's convention): every alert rule as a check with its current
// value against its threshold, where it applies (a scope, or store-wide), since when it fires
// and where the action happens. Firing checks are the banners; pending ones (over the threshold,
// not yet for the rule's duration) are shown apart, never as passed; the others are listed as
// passed, with their values, so "nothing fires" shows what was looked at.
import { percentileOf } from '@retrysafe/store';
import { alertCatalog, completedKeysText, completionsText, forMinutesOf, keptElsewhereText, lastBusyMinutes, shareText, windowText, type Alert, type AlertInputs, type AlertName, type AlertThresholds, type FlowMinutePoint, type PendingAlert, type Severity } from './alerts';

/** Where an alert's action happens: the dashboard's page or the overview's panel. */
export type CheckLink = 'principals' | 'claims' | 'store' | 'retention' | 'unrecorded' | 'reconcile';

/**
 * Prometheus' states: ok (Normal), pending (the condition holds now but has not yet held for the
 * rule's duration) and firing.
 */
export type CheckState = 'ok' | 'pending' | 'firing';

export interface Check {
  name: AlertName;
  /** What is checked, in words: "Conflict share". */
  title: string;
  state: CheckState;
  /** state === 'firing' (kept for the JSON's earlier readers). */
  firing: boolean;
  severity: Severity;
  /** A flow check's service and scope; null for all scopes together or a store-wide check. */
  service: string | null;
  scope: string | null;
  storeWide: boolean;
  /** The current value, formatted ("38%", "12 ms", "1.02x"); "no data" when there is none. */
  value: string;
  /** The threshold it is held against, in words ("over 10% for 5 min"). */
  threshold: string;
  /** Since when the condition has held (firing and pending); null when ok or not known. */
  since: Date | null;
  /** The rule's duration ("for"), minutes; null for a rule that fires as soon as its condition holds. */
  forMinutes: number | null;
  /** Whole minutes the condition has held (pending: "N of forMinutes"); null when ok or not known. */
  heldMinutes: number | null;
  link: CheckLink;
  /** The firing alert's summary and action (empty for a passing or pending check). */
  summary: string;
  action: string;
}

const titles: Record<AlertName, string> = {
  retention_below_window: 'Retention against the retry window',
  rows_over_baseline: 'Store rows against the baseline',
  cleanup_lag: 'Cleanup lag',
  stale_claims: 'Stale claims',
  claim_p99: 'Claim p99 latency',
  mismatch_rate: 'Mismatch share',
  conflict_rate: 'Conflict share',
  rejection_rate: 'Quota rejections share',
  sweeper_stalled: 'Sweeper',
  replica_lag: "Dashboard standby's lag",
  index_over_memory: 'Unique index against memory',
  unrecorded_completions: 'Completions not recorded',
  effects_missing: 'Completed keys whose effect is missing',
};

const links: Record<AlertName, CheckLink> = {
  retention_below_window: 'retention',
  rows_over_baseline: 'store',
  cleanup_lag: 'retention',
  stale_claims: 'claims',
  claim_p99: 'store',
  mismatch_rate: 'principals',
  conflict_rate: 'principals',
  rejection_rate: 'principals',
  sweeper_stalled: 'retention',
  replica_lag: 'store',
  index_over_memory: 'store',
  unrecorded_completions: 'unrecorded',
  effects_missing: 'reconcile',
};

const flowNames = new Set<AlertName>(['claim_p99', 'mismatch_rate', 'conflict_rate', 'rejection_rate']);
/** Checks judged per service, not per scope: where a service is chosen, its own; else every service's. */
const serviceNames = new Set<AlertName>(['unrecorded_completions', 'effects_missing']);

/** "3 completions in the last hour": one service's (or, of null, every service's) unrecorded completions. */
function unrecordedText(input: AlertInputs, thresholds: AlertThresholds, service: string | null): string {
  const count = (input.unrecorded ?? []).filter((row) => service === null || row.service === service).reduce((sum, row) => sum + row.count, 0);
  return `${count === 0 ? 'none' : completionsText(count)} in the last ${windowText(thresholds.unrecordedWindowMinutes)}`;
}

/** "none", "2 completed keys": one Redis-kept service's (or, of null, every one's) completed keys whose effect is missing. */
function effectsMissingText(input: AlertInputs, service: string | null): string {
  const count = (input.reconcile ?? []).filter((row) => service === null || row.service === service).reduce((sum, row) => sum + row.count, 0);
  return count === 0 ? 'none found' : completedKeysText(count);
}

/**
 * The Stale claims check's value: a chosen service kept in Redis or MySQL, its backend's; another
 * chosen service, Postgres's; none chosen, Postgres's and each kept-elsewhere service's. A backend
 * that did not answer says so (never "none").
 */
function staleText(input: AlertInputs, service: string | null): string {
  const latestStore = [...input.store].sort((a, b) => a.at.getTime() - b.at.getTime()).at(-1);
  const postgres = latestStore ? (latestStore.oldestStaleSeconds > 0 ? `oldest ${minutesText(latestStore.oldestStaleSeconds)} past its lease` : 'none past its lease') : 'no sample yet';
  const elsewhere = input.staleElsewhere ?? [];
  const textOf = (reading: (typeof elsewhere)[number]) => {
    const claims = reading.claims;
    if (claims === null) return 'not answered (its key backend did not answer)';
    if (claims.count === 0) return 'none past its lease';
    return `${claims.atLeast ? 'at least ' : ''}${claims.count}, oldest ${minutesText(claims.oldestPastLeaseSeconds ?? 0)} past its lease`;
  };
  const own = service === null ? undefined : elsewhere.find((reading) => reading.service === service);
  if (own) return `${keptElsewhereText(own)}: ${textOf(own)}`;
  if (service !== null || elsewhere.length === 0) return postgres;
  return [`Postgres: ${postgres}`, ...elsewhere.map((reading) => `${keptElsewhereText(reading)}: ${textOf(reading)}`)].join('; ');
}

export function minutesText(seconds: number): string {
  if (seconds < 120) return `${Math.round(seconds)} s`;
  if (seconds < 7_200) return `${Math.round(seconds / 60)} min`;
  if (seconds < 172_800) return `${Number((seconds / 3_600).toFixed(1))} h`;
  return `${Number((seconds / 86_400).toFixed(1))} d`;
}

function msText(ms: number): string {
  return `${ms < 10 ? ms.toFixed(1) : Math.round(ms)} ms`;
}

/**
 * The flow of the chosen service and scope (all of them when not chosen), minute by minute: over
 * the whole look-back when the choice was idle in the rules' windows (readAlertInputs read it so
 * for its checked choice), else over the windows.
 */
function chosenFlow(input: AlertInputs, choice: { service?: string | undefined; scope?: string | undefined }): FlowMinutePoint[] {
  const idle = input.idleChoice;
  if (idle && idle.choice.service === choice.service && idle.choice.scope === choice.scope) return idle.points;
  if (choice.service === undefined && choice.scope === undefined) return input.flow;
  const byMinute = new Map<number, FlowMinutePoint>();
  for (const series of input.flowByScope ?? []) {
    if ((choice.service !== undefined && series.service !== choice.service) || (choice.scope !== undefined && series.scope !== choice.scope)) continue;
    for (const point of series.points) {
      const sum = byMinute.get(point.at.getTime()) ?? { at: point.at, claims: 0, mismatches: 0, conflicts: 0, rejections: 0, latency: point.latency.map(() => 0) };
      sum.claims += point.claims;
      sum.mismatches += point.mismatches;
      sum.conflicts += point.conflicts;
      sum.rejections += point.rejections;
      sum.latency = sum.latency.map((count, bucket) => count + (point.latency[bucket] ?? 0));
      byMinute.set(point.at.getTime(), sum);
    }
  }
  return [...byMinute.values()];
}

/** The flow checks' current values: each share and the p99 over the alert's window. */
function flowValues(points: FlowMinutePoint[], now: Date, thresholds: AlertThresholds): Record<'claim_p99' | 'mismatch_rate' | 'conflict_rate' | 'rejection_rate', string> {
  // The alert's window; when it holds no claim (the rules skip idle minutes), the last busy
  // minutes the inputs hold, said so (readAlertInputs reads the histograms of exactly these).
  const within = (minutes: number) => {
    const recent = points.filter((point) => point.at.getTime() >= now.getTime() - minutes * 60_000);
    const busy = lastBusyMinutes(points, thresholds, minutes);
    if (recent.some((point) => point.claims > 0) || busy.length === 0) return { points: recent, note: '' };
    return { points: busy, note: ' (last busy minutes)' };
  };
  // The rules judge only minutes with minimumClaimsPerMinute claims: a value drawn from quieter
  // minutes alone (3 requests, one a mismatch: 33%) says so, never reads as a judged pass.
  const floor = Math.max(1, thresholds.minimumClaimsPerMinute);
  const judged = (points: FlowMinutePoint[]) => (points.some((point) => point.claims >= floor) ? '' : ` (too few claims to judge: the rule needs ${floor} a minute)`);
  const rate = within(thresholds.rateMinutes);
  const claims = rate.points.reduce((sum, point) => sum + point.claims, 0);
  const share = (pick: (point: FlowMinutePoint) => number) =>
    claims === 0 ? 'no claims' : `${shareText(rate.points.reduce((sum, point) => sum + pick(point), 0) / claims)}${rate.note}${judged(rate.points)}`;
  const slow = within(thresholds.claimP99Minutes);
  const merged = slow.points.reduce<number[]>((sum, point) => point.latency.map((count, bucket) => count + (sum[bucket] ?? 0)), []);
  const p99 = percentileOf(merged, 99);
  return {
    claim_p99: Number.isFinite(p99) ? `${msText(p99)}${slow.note}${judged(slow.points)}` : 'no claims',
    mismatch_rate: share((point) => point.mismatches),
    conflict_rate: share((point) => point.conflicts),
    rejection_rate: share((point) => point.rejections),
  };
}

function thresholdText(name: AlertName, thresholds: AlertThresholds): string {
  switch (name) {
    case 'retention_below_window':
      return 'at least the retry window';
    case 'rows_over_baseline':
      return `over ${thresholds.rowsOverBaselineRatio}x for ${thresholds.rowsOverBaselineMinutes} min`;
    case 'cleanup_lag':
      return `over ${minutesText(thresholds.cleanupLagSeconds)}`;
    case 'stale_claims':
      return `a claim past its lease over ${thresholds.staleClaimMinutes} min`;
    case 'claim_p99':
      return `over ${thresholds.claimP99ObjectiveMs} ms for ${thresholds.claimP99Minutes} min`;
    case 'mismatch_rate':
      return `over ${shareText(thresholds.mismatchShare)} for ${thresholds.rateMinutes} min`;
    case 'conflict_rate':
      return `over ${shareText(thresholds.conflictShare)} for ${thresholds.rateMinutes} min`;
    case 'rejection_rate':
      return `over ${shareText(thresholds.rejectedShare)} for ${thresholds.rateMinutes} min`;
    case 'sweeper_stalled':
      return `no finished run for ${thresholds.sweepStalledIntervals} intervals`;
    case 'replica_lag':
      return `over ${minutesText(thresholds.replicaLagSeconds)} behind the primary`;
    case 'index_over_memory':
      return `over ${shareText(thresholds.indexOverMemoryShare)} of memory for ${thresholds.indexOverMemoryMinutes} min`;
    case 'unrecorded_completions':
      return `any in the last ${windowText(thresholds.unrecordedWindowMinutes)}`;
    case 'effects_missing':
      return 'any found by the reconciler';
  }
}

/** The standby's lag as the check shows it: caught up, or how far behind (and whether its replay is paused). */
export function replicaLagText(replica: AlertInputs['replica']): string {
  if (!replica) return 'no standby';
  if (!replica.inRecovery) return 'not in recovery';
  const paused = replica.replayPaused ? ', replay paused' : '';
  if (replica.bytes === 0) return `caught up${paused}`;
  return `${replica.seconds === null ? 'behind' : minutesText(replica.seconds)} (${bytesText(replica.bytes ?? 0)} to replay${paused})`;
}

/** The unique index against memory as the check shows it: "1.2 GiB of 4.0 GiB (30%, shared_buffers)". */
export function indexMemoryText(memory: AlertInputs['indexMemory']): string {
  if (!memory) return 'not read';
  if (memory.memoryBytes <= 0) return 'no memory figure';
  return `${bytesText(memory.uniqueIndexBytes)} of ${bytesText(memory.memoryBytes)} (${Math.round((memory.uniqueIndexBytes / memory.memoryBytes) * 100)}%, ${memory.memorySource})`;
}

function bytesText(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 ** 2) return `${(bytes / 1024).toFixed(1)} KiB`;
  if (bytes < 1024 ** 3) return `${(bytes / 1024 ** 2).toFixed(1)} MiB`;
  return `${(bytes / 1024 ** 3).toFixed(1)} GiB`;
}

/**
 * Every check for the overview's choice of service and scope: the firing alerts (already
 * filtered to that choice) with their values, then the pending ones (filtered alike), then each
 * other rule as passed.
 */
export function evaluateChecks(
  input: AlertInputs,
  alerts: Alert[],
  thresholds: AlertThresholds,
  choice: { service?: string | undefined; scope?: string | undefined } = {},
  pending: PendingAlert[] = [],
): Check[] {
  const { now } = input;
  const heldMinutes = (since: Date | null) => (since === null ? null : Math.max(0, Math.floor((now.getTime() - since.getTime()) / 60_000)));
  const latestStore = [...input.store].sort((a, b) => a.at.getTime() - b.at.getTime()).at(-1);
  const seriesOf = (alert: { service: string | null; scope: string | null }) =>
    alert.service === null && alert.scope === null
      ? chosenFlow(input, choice)
      : (input.flowByScope?.find((series) => series.service === alert.service && series.scope === alert.scope)?.points ?? []);
  const margins = input.policies.map((policy) => ({ policy, margin: policy.retentionSeconds - policy.retryWindowSeconds }));
  const tightest = margins.sort((a, b) => a.margin - b.margin)[0];
  const sinceSweep = input.sweep.lastFinishedAt ? (now.getTime() - input.sweep.lastFinishedAt.getTime()) / 1000 : null;
  const storeValue: Record<Exclude<AlertName, 'claim_p99' | 'mismatch_rate' | 'conflict_rate' | 'rejection_rate' | 'unrecorded_completions' | 'effects_missing'>, string> = {
    retention_below_window: tightest
      ? tightest.margin < 0
        ? `${tightest.policy.endpoint} (${tightest.policy.service}) keeps keys ${minutesText(tightest.policy.retentionSeconds)} for a ${minutesText(tightest.policy.retryWindowSeconds)} window`
        : `smallest margin ${minutesText(tightest.margin)} (${tightest.policy.endpoint}, ${tightest.policy.service})`
      : 'no policy',
    rows_over_baseline: latestStore ? (latestStore.baselineRows > 0 ? `${(latestStore.estimatedRows / latestStore.baselineRows).toFixed(2)}x` : 'no baseline yet') : 'no sample yet',
    cleanup_lag: latestStore ? minutesText(latestStore.cleanupLagSeconds) : 'no sample yet',
    stale_claims: staleText(input, null),
    sweeper_stalled: sinceSweep === null ? 'no run yet' : `last run ${minutesText(sinceSweep)} ago`,
    replica_lag: replicaLagText(input.replica),
    index_over_memory: indexMemoryText(input.indexMemory),
  };
  const valueOf = (name: AlertName, where: { service: string | null; scope: string | null }) =>
    name === 'stale_claims'
      ? staleText(input, where.service)
      : name === 'unrecorded_completions'
      ? unrecordedText(input, thresholds, where.service)
      : name === 'effects_missing'
        ? effectsMissingText(input, where.service)
        : name === 'claim_p99' || name === 'mismatch_rate' || name === 'conflict_rate' || name === 'rejection_rate'
        ? flowValues(seriesOf(where), now, thresholds)[name]
        : storeValue[name];

  /** A firing or pending rule as a check: its value now against its threshold, since when, and for how long. */
  const checkOf = (alert: Alert | PendingAlert, state: 'firing' | 'pending', forMinutes: number | null, words: { summary: string; action: string }): Check => ({
    name: alert.name,
    title: titles[alert.name],
    state,
    firing: state === 'firing',
    severity: alert.severity,
    service: alert.service,
    scope: alert.scope,
    storeWide: alert.storeWide,
    value: valueOf(alert.name, alert),
    threshold: thresholdText(alert.name, thresholds),
    since: alert.since,
    forMinutes,
    heldMinutes: heldMinutes(alert.since),
    link: links[alert.name],
    ...words,
  });
  const firing: Check[] = alerts.map((alert) => checkOf(alert, 'firing', forMinutesOf(alert.name, thresholds), { summary: alert.summary, action: alert.action }));
  const fired = new Set(alerts.map((alert) => alert.name));
  // A scope pends on its own, whichever other scope fires the same rule.
  const pendingChecks: Check[] = pending.map((alert) => checkOf(alert, 'pending', alert.forMinutes, { summary: '', action: '' }));
  const notOk = new Set([...fired, ...pendingChecks.map((check) => check.name)]);
  const passing: Check[] = (Object.keys(alertCatalog) as AlertName[])
    // The standby's check only where the dashboard reads one (DASHBOARD_READ_URL).
    // The reconciler's only where a Redis-kept service runs one (a reconcile_runs row).
    .filter((name) => !notOk.has(name) && (name !== 'replica_lag' || input.replica !== undefined) && (name !== 'effects_missing' || (input.reconcile?.length ?? 0) > 0))
    .map((name) => {
      const flow = flowNames.has(name);
      const perService = serviceNames.has(name);
      const where = { service: flow || perService ? (choice.service ?? null) : null, scope: flow ? (choice.scope ?? null) : null };
      return {
        name,
        title: titles[name],
        state: 'ok' as const,
        firing: false,
        severity: alertCatalog[name].severity,
        ...where,
        storeWide: !flow && !perService,
        // Stale claims: the chosen service's (its backend's, when it is kept elsewhere).
        value: valueOf(name, perService ? where : { service: name === 'stale_claims' ? (choice.service ?? null) : null, scope: null }),
        threshold: thresholdText(name, thresholds),
        since: null,
        forMinutes: forMinutesOf(name, thresholds),
        heldMinutes: null,
        link: links[name],
        summary: '',
        action: '',
      };
    });
  return [...firing, ...pendingChecks, ...passing];
}
