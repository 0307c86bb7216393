// The Prometheus rules Retrysafe ships (monitoring/prometheus/retrysafe-alerts.yml), generated
// from the dashboard's thresholds and words (alerts.ts), so a team paging from Prometheus
// judges exactly what the overview's banners judge. Flow alerts are per scope (and per
// service once the flow metrics carry one: grouping by an absent label is harmless).
import { alertCatalog, shareText, type AlertName, type AlertThresholds } from './alerts';

export interface RuleFileOptions {
  /** Where the alert runbook (docs/operating.md) lives; each alert's runbook_url is this plus its section's anchor. */
  runbookBaseUrl: string;
  /** rate() window of the flow rules: the dashboard judges minutes; at least 4 scrape intervals. */
  rateWindow: string;
  /**
   * Tests only: every alert's `for` replaced by this (the real-Prometheus test cannot wait
   * 5 minutes). The committed file never sets it.
   */
  forOverride?: string;
}

export const defaultRuleFileOptions: RuleFileOptions = { runbookBaseUrl: 'docs/operating.md', rateWindow: '1m' };

export interface RecordingRule {
  record: string;
  expr: string;
}

export interface AlertingRule {
  alert: string;
  expr: string;
  for?: string;
  labels: { severity: string; retrysafe_alert: AlertName };
  annotations: { summary: string; description: string; runbook_url: string };
}

export interface RuleGroup {
  name: string;
  rules: (RecordingRule | AlertingRule)[];
}

/** The Prometheus alert name of a dashboard alert: conflict_rate -> RetrysafeConflictRate. */
export function prometheusAlertName(name: AlertName): string {
  return `Retrysafe${name
    .split('_')
    .map((word) => word.charAt(0).toUpperCase() + word.slice(1))
    .join('')}`;
}

/** The runbook heading's anchor, as GitHub and most renderers derive it (lower case). */
export const runbookAnchor = (name: AlertName) => prometheusAlertName(name).toLowerCase();

export function prometheusRuleGroups(thresholds: AlertThresholds, options: RuleFileOptions = defaultRuleFileOptions): RuleGroup[] {
  const w = options.rateWindow;
  const rate = `service_scope:retrysafe_claims:rate${w}`;
  const outcomeRate = `service_scope_outcome:retrysafe_claims:rate${w}`;
  const share = `service_scope_outcome:retrysafe_claims:share${w}`;
  const p99 = `service_scope:retrysafe_claim_duration_seconds:p99_${w}`;
  const rowsRatio = 'service:retrysafe_store_rows:baseline_ratio';
  // Minutes with fewer claims than the floor are not judged, as on the dashboard (per scope here).
  const busy = `${rate} * 60 >= ${thresholds.minimumClaimsPerMinute}`;
  const minutes = (value: number) => `${value}m`;

  const recording: RecordingRule[] = [
    // Per-instance counters summed across instances (and, once they carry one, per service).
    { record: outcomeRate, expr: `sum by (service, scope, outcome) (rate(retrysafe_claims_total[${w}]))` },
    { record: rate, expr: `sum by (service, scope) (rate(retrysafe_claims_total[${w}]))` },
    // The share of a scope's claims with each outcome (NaN, never firing, when it had none).
    { record: share, expr: `${outcomeRate}\n/ ignoring (outcome) group_left\n${rate}` },
    { record: p99, expr: `histogram_quantile(0.99, sum by (service, scope, le) (rate(retrysafe_claim_duration_seconds_bucket[${w}])))` },
    // Every instance reports the same store, so max, not sum; no ratio before a baseline exists.
    { record: rowsRatio, expr: 'max by (service) (retrysafe_store_rows_estimate)\n/\n(max by (service) (retrysafe_store_baseline_rows) > 0)' },
  ];

  // Names the service where the series carries one (every series /api/metrics exposes does);
  // nothing where it does not, so the summary never reads "in service ".
  const inService = '{{ with $labels.service }} in service {{ . }}{{ end }}';
  const alert = (name: AlertName, expr: string, summary: string, duration?: string): AlertingRule => ({
    alert: prometheusAlertName(name),
    expr,
    ...(duration === undefined && options.forOverride === undefined ? {} : { for: options.forOverride ?? duration }),
    labels: { severity: alertCatalog[name].severity, retrysafe_alert: name },
    annotations: { summary, description: alertCatalog[name].action, runbook_url: `${options.runbookBaseUrl}#${runbookAnchor(name)}` },
  });
  const rateAlert = (name: 'mismatch_rate' | 'conflict_rate' | 'rejection_rate', outcome: string, limit: number, who: string) =>
    alert(
      name,
      `${share}{outcome="${outcome}"} > ${limit}\nand ignoring (outcome)\n${busy}`,
      `Over ${shareText(limit)} of claims on {{ $labels.scope }}${inService} for ${thresholds.rateMinutes} min: ${who} ${alertCatalog[name].what}`,
      minutes(thresholds.rateMinutes),
    );

  const alerting: AlertingRule[] = [
    alert(
      'retention_below_window',
      'max by (service, scope) (retrysafe_policy_retention_seconds)\n< max by (service, scope) (retrysafe_policy_retry_window_seconds)',
      `{{ $labels.scope }}${inService} keeps keys {{ $value }} s, less than its documented window`,
    ),
    alert(
      'rows_over_baseline',
      `${rowsRatio} > ${thresholds.rowsOverBaselineRatio}`,
      `The store holds {{ $value | printf "%.2f" }}x its baseline${inService}, over ${thresholds.rowsOverBaselineRatio}x, for ${thresholds.rowsOverBaselineMinutes} min`,
      minutes(thresholds.rowsOverBaselineMinutes),
    ),
    alert(
      'cleanup_lag',
      `max by (service) (retrysafe_store_cleanup_lag_seconds) > ${thresholds.cleanupLagSeconds}`,
      `The cleanup${inService} is {{ $value | humanizeDuration }} behind (the oldest row past its expiry; in the partitioned layout the oldest partition past its end, or the walk of keys promised less than a day)`,
    ),
    // As on the dashboard: Postgres's claims (no service label) and each Redis- or MySQL-kept
    // service's; a service whose key backend did not answer fires too (its claims are not known:
    // its stale-claim series are absent, retrysafe_stale_claims_unread is 1), marked unread.
    alert(
      'stale_claims',
      `max by (service) (retrysafe_stale_claim_oldest_seconds) > ${thresholds.staleClaimMinutes * 60}\nor\nlabel_replace(max by (service) (retrysafe_stale_claims_unread) > 0, "unread", "true", "", "")`,
      `{{ if $labels.unread }}The stale claims${inService} could not be read: its key backend did not answer{{ else }}A claim${inService} has been past its lease for {{ $value | humanizeDuration }}{{ end }}`,
    ),
    alert(
      'claim_p99',
      `${p99} > ${thresholds.claimP99ObjectiveMs / 1000}\nand\n${busy}`,
      `Claim p99 on {{ $labels.scope }}${inService} over its ${thresholds.claimP99ObjectiveMs} ms objective for ${thresholds.claimP99Minutes} min`,
      minutes(thresholds.claimP99Minutes),
    ),
    rateAlert('mismatch_rate', 'mismatch', thresholds.mismatchShare, 'clients'),
    rateAlert('conflict_rate', 'conflict', thresholds.conflictShare, 'clients'),
    rateAlert('rejection_rate', 'rejected', thresholds.rejectedShare, 'principals'),
    alert(
      'sweeper_stalled',
      `time() - max by (service) (retrysafe_sweep_last_run_timestamp_seconds)\n> ${thresholds.sweepStalledIntervals} * max by (service) (retrysafe_sweep_interval_seconds)`,
      `No sweep has finished${inService} for {{ $value | humanizeDuration }}, over ${thresholds.sweepStalledIntervals} sweep intervals`,
    ),
    // As on the dashboard: the unique index against DATABASE_MEMORY_BYTES, else shared_buffers.
    alert(
      'index_over_memory',
      `max by (service) (retrysafe_store_unique_index_bytes)\n> ${thresholds.indexOverMemoryShare} * max by (service) (retrysafe_database_memory_bytes)`,
      `The key table's unique index${inService} is {{ $value | humanize1024 }}B, over ${shareText(thresholds.indexOverMemoryShare)} of the database's memory, for ${thresholds.indexOverMemoryMinutes} min`,
      minutes(thresholds.indexOverMemoryMinutes),
    ),
    // As on the dashboard: any completion not recorded in the window, per service (every
    // instance's, read from the database: each instance reports the same, so max).
    alert(
      'unrecorded_completions',
      'max by (service) (retrysafe_unrecorded_completions_window) > 0',
      `{{ $value }} completions${inService} could not be recorded in the last ${thresholds.unrecordedWindowMinutes} min: the work ran, and a retry after the lease runs it again`,
    ),
    // As on the dashboard: any completed key whose effect a Redis-kept service's reconciler did not
    // find, per service and scope (read from the database: every instance reports the same, so max).
    alert(
      'effects_missing',
      'max by (service, scope) (retrysafe_reconcile_findings{kind="effect_missing"}) > 0',
      `{{ $value }} completed keys on {{ $labels.scope }}${inService} whose effect is missing from the service's database`,
    ),
    // Only where the dashboard reads a standby (DASHBOARD_READ_URL: the gauges exist then). As on
    // the dashboard: over the threshold behind, or promoted (no longer in recovery).
    alert(
      'replica_lag',
      `max by (service) (retrysafe_dashboard_replica_lag_seconds) > ${thresholds.replicaLagSeconds}\nor\nmax by (service) (retrysafe_dashboard_replica_in_recovery) == 0`,
      `The dashboard's standby${inService} is over ${thresholds.replicaLagSeconds} s behind the primary, or no longer in recovery`,
    ),
  ];
  // One group: recording rules first, so the alerts read this evaluation's values.
  return [{ name: 'retrysafe', rules: [...recording, ...alerting] }];
}

const quoted = (value: string) => JSON.stringify(value); // a JSON string is a YAML double-quoted scalar

function block(key: string, text: string, indent: string): string[] {
  if (!text.includes('\n')) return [`${indent}${key}: ${quoted(text)}`];
  return [`${indent}${key}: |-`, ...text.split('\n').map((line) => `${indent}  ${line}`)];
}

/** The rule file's YAML (a fixed, small shape, so written directly rather than through a YAML library). */
export function renderRuleFile(groups: RuleGroup[], header: string[]): string {
  const lines = [...header.map((line) => `# ${line}`.trimEnd()), 'groups:'];
  for (const group of groups) {
    lines.push(`  - name: ${quoted(group.name)}`, '    rules:');
    for (const rule of group.rules) {
      if ('record' in rule) {
        lines.push(`      - record: ${quoted(rule.record)}`, ...block('expr', rule.expr, '        '));
        continue;
      }
      lines.push(`      - alert: ${quoted(rule.alert)}`, ...block('expr', rule.expr, '        '));
      if (rule.for !== undefined) lines.push(`        for: ${quoted(rule.for)}`);
      lines.push('        labels:', ...Object.entries(rule.labels).map(([key, value]) => `          ${key}: ${quoted(value)}`));
      lines.push('        annotations:', ...Object.entries(rule.annotations).map(([key, value]) => `          ${key}: ${quoted(value)}`));
    }
  }
  return `${lines.join('\n')}\n`;
}

export const RULE_FILE_HEADER = [
  'Retrysafe alerting and recording rules for Prometheus.',
  'Generated by `npm run prometheus:rules` from the dashboard\'s thresholds (server/metrics/alerts.ts):',
  'do not edit by hand. ALERT_THRESHOLDS and RUNBOOK_BASE_URL change what it writes (see docs/operating.md, Prometheus rules).',
];

export function prometheusRuleFile(thresholds: AlertThresholds, options: RuleFileOptions = defaultRuleFileOptions): string {
  return renderRuleFile(prometheusRuleGroups(thresholds, options), RULE_FILE_HEADER);
}
