// The shipped Prometheus rule file is the generator's output for the dashboard's default
// thresholds, byte for byte (so its thresholds and durations are the dashboard's), and
// every dashboard alert has one rule with the banner's severity and words and a runbook section
// in docs/operating.md.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { alertCatalog, alertThresholds, thresholdsWith, type AlertName } from '../../server/metrics/alerts';
import { prometheusRuleFile, prometheusRuleGroups, type AlertingRule } from '../../server/metrics/prometheus-rules';

const alertingRules = (groups: ReturnType<typeof prometheusRuleGroups>) =>
  groups.flatMap((group) => group.rules).filter((rule): rule is AlertingRule => 'alert' in rule);

describe('the Prometheus rule file', () => {
  it('is what npm run prometheus:rules generates from the default thresholds', () => {
    const committed = readFileSync('monitoring/prometheus/retrysafe-alerts.yml', 'utf8');
    expect(committed, 'run `npm run prometheus:rules` and commit the result').toBe(prometheusRuleFile(alertThresholds));
  });

  it('has one rule per dashboard alert, with its severity, its action and a runbook section in docs/operating.md', () => {
    const runbook = readFileSync('docs/operating.md', 'utf8');
    const rules = alertingRules(prometheusRuleGroups(alertThresholds));
    expect(rules.map((rule) => rule.labels.retrysafe_alert).sort()).toEqual(Object.keys(alertCatalog).sort());
    for (const rule of rules) {
      const entry = alertCatalog[rule.labels.retrysafe_alert];
      expect(rule.labels.severity).toBe(entry.severity);
      expect(rule.annotations.description).toBe(entry.action);
      expect(rule.annotations.runbook_url).toBe(`docs/operating.md#${rule.alert.toLowerCase()}`);
      expect(runbook, `runbook heading for ${rule.alert}`).toMatch(new RegExp(`^### ${rule.alert}$`, 'm'));
    }
  });

  it('follows the thresholds it is given (ALERT_THRESHOLDS) and the runbook base', () => {
    const byName = (groups: ReturnType<typeof prometheusRuleGroups>) =>
      new Map(alertingRules(groups).map((rule) => [rule.labels.retrysafe_alert, rule] as [AlertName, AlertingRule]));
    const defaults = byName(prometheusRuleGroups(alertThresholds));
    expect(defaults.get('conflict_rate')?.expr).toContain('share1m{outcome="conflict"} > 0.1\n');
    expect(defaults.get('conflict_rate')?.expr).toContain('* 60 >= 20');
    expect(defaults.get('conflict_rate')?.for).toBe('5m');
    expect(defaults.get('rows_over_baseline')?.for).toBe('15m');
    expect(defaults.get('claim_p99')?.expr).toContain('> 0.05\n');
    const changed = byName(
      prometheusRuleGroups(thresholdsWith({ conflictShare: 0.2, rateMinutes: 7, minimumClaimsPerMinute: 50, claimP99ObjectiveMs: 30, sweepStalledIntervals: 4 }), {
        runbookBaseUrl: 'https://git.internal/ops/retrysafe/blob/main/docs/operating.md',
        rateWindow: '2m',
      }),
    );
    const conflict = changed.get('conflict_rate');
    expect(conflict?.expr).toContain('service_scope_outcome:retrysafe_claims:share2m{outcome="conflict"} > 0.2\n');
    expect(conflict?.expr).toContain('* 60 >= 50');
    expect(conflict?.for).toBe('7m');
    expect(conflict?.annotations.summary).toBe('Over 20% of claims on {{ $labels.scope }}{{ with $labels.service }} in service {{ . }}{{ end }} for 7 min: clients retry while the original is still running');
    expect(conflict?.annotations.runbook_url).toBe('https://git.internal/ops/retrysafe/blob/main/docs/operating.md#retrysafeconflictrate');
    expect(changed.get('claim_p99')?.expr).toContain('> 0.03\n');
    expect(changed.get('sweeper_stalled')?.expr).toContain('> 4 * max by (service) (retrysafe_sweep_interval_seconds)');
  });
});
