// The series the shipped Prometheus rules (monitoring/prometheus/) read, on /api/metrics'
// registry over a real database: the baseline beside the rows, the oldest stale claim's age,
// each endpoint's window and retention, the sweep interval, and every claim outcome of a
// scope from its first claim on (at 0), so rate() sees the first conflict. The exposition
// still parses, and passes `promtool check metrics` when promtool is installed.
import { execFileSync } from 'node:child_process';
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { describe, expect, it } from 'vitest';
import { DEMO_SERVICE, PAYMENTS_ENDPOINT, REFUNDS_ENDPOINT, defaultPolicyFields } from '../../server/demo/policies';
import { claimOutcomes } from '@retrysafe/store';
import { createPrometheusMetrics } from '../../server/metrics/prometheus';
import { ensurePolicies } from '../../server/retention/policies';
import { useTestDatabase } from '../helpers/database';
import { promtoolPath } from '../helpers/prometheus';

describe('the series the Prometheus rules read', () => {
  const db = useTestDatabase();

  it('are exposed with their values, lint-clean', async () => {
    await ensurePolicies(db.pool, DEMO_SERVICE, defaultPolicyFields, 'system');
    // Another service with the same payments endpoint string, and a window of its own.
    const payments = defaultPolicyFields[PAYMENTS_ENDPOINT];
    if (!payments) throw new Error('no payments policy');
    const ordersPayments = { ...payments, retryWindowSeconds: 3_600, retentionSeconds: 7_200 };
    await ensurePolicies(db.pool, 'orders', { [PAYMENTS_ENDPOINT]: ordersPayments }, 'system');
    await db.pool.query(
      `INSERT INTO store_stats (sampled_at, estimated_rows, baseline_rows, table_bytes, index_bytes, toast_bytes, cleanup_lag_seconds, stale_claims)
       VALUES (date_trunc('minute', now()) - interval '2 minutes', 1500, 900, 8192, 16384, 0, 0, 0),
              (date_trunc('minute', now()) - interval '1 minute', 1500, 1000, 8192, 16384, 0, 0, 0)`,
    );
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
       VALUES (gen_random_uuid(), 'demo', 'POST /a', 'crashed-1', 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), now() - interval '700 seconds', now() + interval '1 day'),
              (gen_random_uuid(), 'orders', 'POST /a', 'crashed-2', 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), now() - interval '100 seconds', now() + interval '1 day')`,
    );
    const { registry, observer } = createPrometheusMetrics(db.pool, undefined, { sweepIntervalSeconds: 45 });
    observer.record({ service: DEMO_SERVICE, scope: PAYMENTS_ENDPOINT, outcome: 'new', claimLatencyMs: 2 });
    const text = await registry.metrics();
    const families = new Map(parsePrometheusTextFormat(text).map((family) => [family.name, family]));
    const value = (name: string, labels: Record<string, string> = {}) =>
      Number(families.get(name)?.metrics.find((sample) => Object.entries(labels).every(([key, wanted]) => sample.labels?.[key] === wanted))?.value);

    expect(value('retrysafe_store_baseline_rows')).toBe(1000); // the last sample's
    expect(value('retrysafe_stale_claims')).toBe(2);
    expect(value('retrysafe_stale_claim_oldest_seconds')).toBeGreaterThanOrEqual(700);
    expect(value('retrysafe_stale_claim_oldest_seconds')).toBeLessThan(760);
    expect(value('retrysafe_sweep_interval_seconds')).toBe(45);
    for (const scope of [PAYMENTS_ENDPOINT, REFUNDS_ENDPOINT]) {
      const policy = defaultPolicyFields[scope];
      expect(value('retrysafe_policy_retry_window_seconds', { service: DEMO_SERVICE, scope })).toBe(policy?.retryWindowSeconds);
      expect(value('retrysafe_policy_retention_seconds', { service: DEMO_SERVICE, scope })).toBe(policy?.retentionSeconds);
    }
    // Each service's policy of the same endpoint is its own series.
    expect(value('retrysafe_policy_retry_window_seconds', { service: 'orders', scope: PAYMENTS_ENDPOINT })).toBe(3_600);
    expect(value('retrysafe_policy_retention_seconds', { service: 'orders', scope: PAYMENTS_ENDPOINT })).toBe(7_200);
    expect(families.get('retrysafe_policy_retry_window_seconds')?.metrics.every((sample) => sample.labels?.service !== undefined)).toBe(true);
    // One claim on the demo's payments: all its outcomes are there, the others at 0; no refund
    // series yet, and none for the other service's payments.
    const claims = families.get('retrysafe_claims_total')?.metrics ?? [];
    expect(claims.filter((sample) => sample.labels?.scope === PAYMENTS_ENDPOINT).map((sample) => [sample.labels?.service, sample.labels?.outcome, Number(sample.value)])).toEqual(
      claimOutcomes.map((outcome) => [DEMO_SERVICE, outcome, outcome === 'new' ? 1 : 0]),
    );
    expect(claims.some((sample) => sample.labels?.scope === REFUNDS_ENDPOINT)).toBe(false);
    // The latency histogram's series carry the service too (read from the text: the parser drops a histogram's labels).
    const latency = text.split('\n').filter((line) => line.startsWith('retrysafe_claim_duration_seconds_count'));
    expect(latency).toEqual([`retrysafe_claim_duration_seconds_count{service="${DEMO_SERVICE}",scope="${PAYMENTS_ENDPOINT}"} 1`]);

    const promtool = promtoolPath();
    if (!promtool) {
      console.warn('promtool not found (apt-get install prometheus): `promtool check metrics` skipped');
      return;
    }
    // Exit status 0: no problems (it prints nothing then).
    expect(execFileSync(promtool, ['check', 'metrics'], { input: text, encoding: 'utf8' })).toBe('');
  });

  it("expose the store's completion counters as they stand at each scrape", async () => {
    const counts = { unrecorded: 0, retried: 0 };
    const { registry } = createPrometheusMetrics(db.pool, undefined, { completions: () => counts });
    const sample = async (name: string) => {
      const family = parsePrometheusTextFormat(await registry.metrics()).find((entry) => entry.name === name);
      return family ? Number(family.metrics[0]?.value) : undefined;
    };
    expect(await sample('retrysafe_unrecorded_completions_total')).toBe(0);
    counts.unrecorded = 2;
    counts.retried = 5;
    expect(await sample('retrysafe_unrecorded_completions_total')).toBe(2);
    expect(await sample('retrysafe_completion_retries_total')).toBe(5);
  });
});
