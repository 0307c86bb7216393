// The overview's checks (pghero's convention): every alert rule as a check with its current
// value against its threshold, where it applies (a scope, or store-wide), since when it fires
// and where the action happens. Firing checks are the banners; the others are listed as
// passed, with their values, so "nothing fires" shows what was looked at.
import { percentileOf } from '@retrysafe/store';
import { alertCatalog, lastBusyMinutes, shareText, type Alert, type AlertInputs, type AlertName, type AlertThresholds, type FlowMinutePoint, type Severity } from './alerts';

/** Where an alert's action happens: the dashboard's page or the overview's panel. */
export type CheckLink = 'principals' | 'claims' | 'store' | 'retention';

export interface Check {
  name: AlertName;
  /** What is checked, in words: "Conflict share". */
  title: string;
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
  since: Date | null;
  link: CheckLink;
  /** The firing alert's summary and action (empty for a passing check). */
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
};

const flowNames = new Set<AlertName>(['claim_p99', 'mismatch_rate', 'conflict_rate', 'rejection_rate']);

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
  const rate = within(thresholds.rateMinutes);
  const claims = rate.points.reduce((sum, point) => sum + point.claims, 0);
  const share = (pick: (point: FlowMinutePoint) => number) =>
    claims === 0 ? 'no claims' : `${shareText(rate.points.reduce((sum, point) => sum + pick(point), 0) / claims)}${rate.note}`;
  const slow = within(thresholds.claimP99Minutes);
  const merged = slow.points.reduce<number[]>((sum, point) => point.latency.map((count, bucket) => count + (sum[bucket] ?? 0)), []);
  const p99 = percentileOf(merged, 99);
  return {
    claim_p99: Number.isFinite(p99) ? `${msText(p99)}${slow.note}` : 'no claims',
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
  }
}

/**
 * Every check for the overview's choice of service and scope: the firing alerts (already
 * filtered to that choice) with their values, then each other rule as passed.
 */
export function evaluateChecks(
  input: AlertInputs,
  alerts: Alert[],
  thresholds: AlertThresholds,
  choice: { service?: string | undefined; scope?: string | undefined } = {},
): Check[] {
  const { now } = input;
  const latestStore = [...input.store].sort((a, b) => a.at.getTime() - b.at.getTime()).at(-1);
  const seriesOf = (alert: { service: string | null; scope: string | null }) =>
    alert.service === null && alert.scope === null
      ? chosenFlow(input, choice)
      : (input.flowByScope?.find((series) => series.service === alert.service && series.scope === alert.scope)?.points ?? []);
  const margins = input.policies.map((policy) => ({ policy, margin: policy.retentionSeconds - policy.retryWindowSeconds }));
  const tightest = margins.sort((a, b) => a.margin - b.margin)[0];
  const sinceSweep = input.sweep.lastFinishedAt ? (now.getTime() - input.sweep.lastFinishedAt.getTime()) / 1000 : null;
  const storeValue: Record<Exclude<AlertName, 'claim_p99' | 'mismatch_rate' | 'conflict_rate' | 'rejection_rate'>, string> = {
    retention_below_window: tightest
      ? tightest.margin < 0
        ? `${tightest.policy.endpoint} (${tightest.policy.service}) keeps keys ${minutesText(tightest.policy.retentionSeconds)} for a ${minutesText(tightest.policy.retryWindowSeconds)} window`
        : `smallest margin ${minutesText(tightest.margin)} (${tightest.policy.endpoint}, ${tightest.policy.service})`
      : 'no policy',
    rows_over_baseline: latestStore ? (latestStore.baselineRows > 0 ? `${(latestStore.estimatedRows / latestStore.baselineRows).toFixed(2)}x` : 'no baseline yet') : 'no sample yet',
    cleanup_lag: latestStore ? minutesText(latestStore.cleanupLagSeconds) : 'no sample yet',
    stale_claims: latestStore ? (latestStore.oldestStaleSeconds > 0 ? `oldest ${minutesText(latestStore.oldestStaleSeconds)} past its lease` : 'none past its lease') : 'no sample yet',
    sweeper_stalled: sinceSweep === null ? 'no run yet' : `last run ${minutesText(sinceSweep)} ago`,
  };
  const valueOf = (name: AlertName, where: { service: string | null; scope: string | null }) =>
    name === 'claim_p99' || name === 'mismatch_rate' || name === 'conflict_rate' || name === 'rejection_rate' ? flowValues(seriesOf(where), now, thresholds)[name] : storeValue[name];

  const firing: Check[] = alerts.map((alert) => ({
    name: alert.name,
    title: titles[alert.name],
    firing: true,
    severity: alert.severity,
    service: alert.service,
    scope: alert.scope,
    storeWide: alert.storeWide,
    value: valueOf(alert.name, alert),
    threshold: thresholdText(alert.name, thresholds),
    since: alert.since,
    link: links[alert.name],
    summary: alert.summary,
    action: alert.action,
  }));
  const fired = new Set(alerts.map((alert) => alert.name));
  const passing: Check[] = (Object.keys(alertCatalog) as AlertName[])
    .filter((name) => !fired.has(name))
    .map((name) => {
      const flow = flowNames.has(name);
      const where = { service: flow ? (choice.service ?? null) : null, scope: flow ? (choice.scope ?? null) : null };
      return {
        name,
        title: titles[name],
        firing: false,
        severity: alertCatalog[name].severity,
        ...where,
        storeWide: !flow,
        value: valueOf(name, { service: null, scope: null }),
        threshold: thresholdText(name, thresholds),
        since: null,
        link: links[name],
        summary: '',
        action: '',
      };
    });
  return [...firing, ...passing];
}
