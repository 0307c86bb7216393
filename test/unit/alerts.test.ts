// Each alert fires on a crafted series that meets its rule for its whole duration, and
// clears when the series recovers (or when the rule held for less than the duration).
import { describe, expect, it } from 'vitest';
import { alertThresholds, evaluateAlerts, type AlertInputs, type FlowMinutePoint, type StoreSamplePoint } from '../../server/metrics/alerts';
import { evaluateChecks } from '../../server/metrics/checks';
import { BUCKET_COUNT, bucketOf } from '@retrysafe/store';

const now = new Date('2026-12-02T12:00:00Z');
const minutesAgo = (m: number) => new Date(now.getTime() - m * 60_000);

function store(minutes: number, point: (m: number) => Partial<StoreSamplePoint>): StoreSamplePoint[] {
  return Array.from({ length: minutes + 1 }, (_, i) => ({
    at: minutesAgo(minutes - i),
    estimatedRows: 1_000,
    baselineRows: 1_000,
    cleanupLagSeconds: 0,
    oldestStaleSeconds: 0,
    ...point(minutes - i),
  }));
}

function histogram(latencyMs: number, count: number): number[] {
  const buckets = new Array<number>(BUCKET_COUNT).fill(0);
  buckets[bucketOf(latencyMs)] = count;
  return buckets;
}

function flow(minutes: number, point: (m: number) => Partial<FlowMinutePoint>): FlowMinutePoint[] {
  return Array.from({ length: minutes + 1 }, (_, i) => ({ at: minutesAgo(minutes - i), claims: 100, mismatches: 0, conflicts: 0, rejections: 0, latency: histogram(2, 100), ...point(minutes - i) }));
}

const names = (input: Parameters<typeof evaluateAlerts>[0]) => evaluateAlerts(input).map((alert) => alert.name);
const quiet = { now, store: store(20, () => ({})), flow: flow(10, () => ({})), policies: [], sweep: { lastFinishedAt: minutesAgo(1), intervalSeconds: 60 } };

describe('alerts', () => {
  it('stays quiet on a healthy series', () => {
    expect(names(quiet)).toEqual([]);
  });

  it('fires rows_over_baseline after 15 minutes over 1.25x, and not after 10', () => {
    expect(names({ ...quiet, store: store(20, () => ({ estimatedRows: 1_300 })) })).toEqual(['rows_over_baseline']);
    expect(names({ ...quiet, store: store(20, (m) => ({ estimatedRows: m <= 10 ? 1_300 : 1_000 })) })).toEqual([]);
    expect(names({ ...quiet, store: store(20, (m) => ({ estimatedRows: m === 0 ? 1_000 : 1_300 })) })).toEqual([]);
  });

  it('fires cleanup_lag over an hour', () => {
    expect(names({ ...quiet, store: store(20, () => ({ cleanupLagSeconds: 3_700 })) })).toEqual(['cleanup_lag']);
    expect(names({ ...quiet, store: store(20, () => ({ cleanupLagSeconds: 3_500 })) })).toEqual([]);
  });

  it('fires stale_claims when one is 10 minutes past its lease', () => {
    expect(names({ ...quiet, store: store(20, (m) => ({ oldestStaleSeconds: m === 0 ? 660 : 0 })) })).toEqual(['stale_claims']);
    expect(names({ ...quiet, store: store(20, (m) => ({ oldestStaleSeconds: m === 0 ? 300 : 0 })) })).toEqual([]);
  });

  it("fires stale_claims for a Redis- or MySQL-kept service on its backend's claims, and for one whose backend did not answer", () => {
    const staleElsewhere: NonNullable<AlertInputs['staleElsewhere']> = [
      { service: 'cart', backend: 'redis', claims: { count: 2, atLeast: false, oldestPastLeaseSeconds: 660 } },
      { service: 'orders', backend: 'mysql', claims: { count: 1, atLeast: false, oldestPastLeaseSeconds: 300 } },
      { service: 'shop', backend: 'mysql', claims: null },
      { service: 'idle', backend: 'redis', claims: { count: 0, atLeast: false, oldestPastLeaseSeconds: null } },
    ];
    const alerts = evaluateAlerts({ ...quiet, staleElsewhere });
    expect(alerts.map((alert) => [alert.name, alert.service, alert.scope, alert.storeWide, alert.summary])).toEqual([
      ['stale_claims', 'cart', null, false, 'A claim of cart (Redis) has been past its lease for 11 min'],
      ['stale_claims', 'shop', null, false, 'The stale claims of shop (MySQL) could not be read: its key backend did not answer'],
    ]);
    expect(alerts[0]?.since).toEqual(new Date(now.getTime() - 660_000));
    expect(alerts[1]?.since).toBeNull();
    expect(alerts[1]?.action).toMatch(/DASHBOARD_KEYS_MYSQL/);
    // The Stale claims check's value: every backend's with none chosen, a chosen kept-elsewhere service's own, never "none" for one unread.
    const staleValue = (service?: string) => evaluateChecks({ ...quiet, staleElsewhere }, [], alertThresholds, { service }).find((check) => check.name === 'stale_claims')?.value;
    expect(staleValue()).toBe(
      'Postgres: none past its lease; cart (Redis): 2, oldest 11 min past its lease; orders (MySQL): 1, oldest 5 min past its lease; shop (MySQL): not answered (its key backend did not answer); idle (Redis): none past its lease',
    );
    expect(staleValue('shop')).toBe('shop (MySQL): not answered (its key backend did not answer)');
    expect(staleValue('demo')).toBe('none past its lease');
    // A firing one's value is its service's.
    expect(evaluateChecks({ ...quiet, staleElsewhere }, alerts, alertThresholds).filter((check) => check.name === 'stale_claims').map((check) => [check.state, check.service, check.value])).toEqual([
      ['firing', 'cart', 'cart (Redis): 2, oldest 11 min past its lease'],
      ['firing', 'shop', 'shop (MySQL): not answered (its key backend did not answer)'],
    ]);
  });

  it('fires claim_p99 over the objective for 5 minutes', () => {
    expect(names({ ...quiet, flow: flow(10, () => ({ latency: histogram(80, 100) })) })).toEqual(['claim_p99']);
    expect(names({ ...quiet, flow: flow(10, (m) => ({ latency: histogram(m === 0 ? 2 : 80, 100) })) })).toEqual([]);
    // Too little traffic to judge: no alert.
    expect(names({ ...quiet, flow: flow(10, () => ({ claims: 3, latency: histogram(80, 3) })) })).toEqual([]);
  });

  it('fires mismatch_rate and conflict_rate over their shares', () => {
    expect(names({ ...quiet, flow: flow(10, () => ({ mismatches: 8 })) })).toEqual(['mismatch_rate']);
    expect(names({ ...quiet, flow: flow(10, () => ({ conflicts: 15 })) })).toEqual(['conflict_rate']);
    expect(names({ ...quiet, flow: flow(10, () => ({ mismatches: 2, conflicts: 5 })) })).toEqual([]);
  });

  it('shows a share or p99 drawn from minutes under the claims floor as not judged, never as a plain pass', () => {
    // 3 requests in the window, one a mismatch: 33% over the 5% threshold, but no minute has the
    // rule's 20 claims, so the rule neither fires nor pends; the check says why.
    const few = { ...quiet, flow: flow(10, (m) => (m === 0 ? { claims: 3, mismatches: 1, latency: histogram(80, 3) } : { claims: 0, latency: histogram(2, 0) })) };
    const checks = evaluateChecks(few, evaluateAlerts(few), alertThresholds);
    const mismatch = checks.find((check) => check.name === 'mismatch_rate');
    expect(mismatch).toMatchObject({ state: 'ok', value: '33.3% (too few claims to judge: the rule needs 20 a minute)' });
    expect(checks.find((check) => check.name === 'claim_p99')?.value).toMatch(/ \(too few claims to judge: the rule needs 20 a minute\)$/);
    // A judged window keeps its plain value.
    const busy = evaluateChecks(quiet, evaluateAlerts(quiet), alertThresholds);
    expect(busy.find((check) => check.name === 'mismatch_rate')?.value).toBe('0%');
  });

  it('fires rejection_rate over 1% of claims rejected at the quota, and not under the claims floor', () => {
    expect(names({ ...quiet, flow: flow(10, () => ({ rejections: 2 })) })).toEqual(['rejection_rate']);
    expect(names({ ...quiet, flow: flow(10, () => ({ rejections: 1 })) })).toEqual([]);
    expect(names({ ...quiet, flow: flow(10, () => ({ claims: 19, rejections: 5 })) })).toEqual([]);
    expect(evaluateAlerts({ ...quiet, flow: flow(10, () => ({ rejections: 2 })) })[0]?.summary).toBe('Over 1% of claims for 5 min: principals are over their live-key quota (429)');
  });

  it('fires replica_lag over 60 s behind or when the standby was promoted, and checks it only where there is a standby', () => {
    const replica = (lag: Partial<NonNullable<Parameters<typeof evaluateAlerts>[0]['replica']>>) => ({ measuredAt: now, inRecovery: true, replayPaused: false, bytes: 4_096, seconds: 30, ...lag });
    expect(names({ ...quiet, replica: replica({ seconds: 60 }) })).toEqual([]);
    expect(names({ ...quiet, replica: replica({ bytes: 0, seconds: 0 }) })).toEqual([]);
    const behind = evaluateAlerts({ ...quiet, replica: replica({ seconds: 61, replayPaused: true }) });
    expect(behind.map((alert) => alert.name)).toEqual(['replica_lag']);
    expect(behind[0]).toMatchObject({ storeWide: true, severity: 'warning', since: new Date(now.getTime() - 61_000) });
    expect(behind[0]?.summary).toBe("The dashboard's standby is 61 s behind the primary (4096 bytes of WAL to replay, replay paused), over 60 s");
    expect(names({ ...quiet, replica: replica({ inRecovery: false, bytes: null, seconds: null }) })).toEqual(['replica_lag']);
    const checked = (input: Parameters<typeof evaluateAlerts>[0]) => evaluateChecks(input, evaluateAlerts(input), alertThresholds).find((check) => check.name === 'replica_lag');
    expect(checked(quiet)).toBeUndefined();
    expect(checked({ ...quiet, replica: replica({ bytes: 0, seconds: 0 }) })).toMatchObject({ firing: false, value: 'caught up', threshold: 'over 60 s behind the primary' });
    expect(checked({ ...quiet, replica: replica({ seconds: 90, bytes: 2_048 }) })).toMatchObject({ firing: true, value: '90 s (2.0 KiB to replay)' });
  });

  it('fires sweeper_stalled when no sweep has finished for 3 intervals', () => {
    expect(names({ ...quiet, sweep: { lastFinishedAt: minutesAgo(3.1), intervalSeconds: 60 } })).toEqual(['sweeper_stalled']);
    expect(names({ ...quiet, sweep: { lastFinishedAt: minutesAgo(2.9), intervalSeconds: 60 } })).toEqual([]);
    expect(names({ ...quiet, sweep: { lastFinishedAt: minutesAgo(25), intervalSeconds: 600 } })).toEqual([]);
    // No sweep has ever finished (a new install): nothing to judge.
    expect(names({ ...quiet, sweep: { lastFinishedAt: null, intervalSeconds: 60 } })).toEqual([]);
  });

  it('always fires retention_below_window as critical', () => {
    const alerts = evaluateAlerts({
      ...quiet,
      policies: [
        { service: 'orders', endpoint: 'POST /x', retryWindowSeconds: 86_400, retentionSeconds: 3_600 },
        // The same endpoint of another service, whose retention covers its window.
        { service: 'demo', endpoint: 'POST /x', retryWindowSeconds: 3_600, retentionSeconds: 7_200 },
      ],
    });
    expect(alerts.map((alert) => [alert.name, alert.severity])).toEqual([['retention_below_window', 'critical']]);
    expect(alerts[0]?.summary).toBe('POST /x (orders) keeps keys 3600 s, less than its documented 86400 s window');
    expect(alerts[0]?.action).toMatch(/Raise the retention/);
  });

  it('judges each service’s scope on its own series, naming both', () => {
    const alerts = evaluateAlerts({
      ...quiet,
      flowByScope: [
        { service: 'orders', scope: 'POST /x', points: flow(10, () => ({ mismatches: 8 })) },
        // The same scope name in another service, quiet.
        { service: 'demo', scope: 'POST /x', points: flow(10, () => ({})) },
      ],
    });
    expect(alerts.map((alert) => [alert.name, alert.service, alert.scope, alert.storeWide])).toEqual([['mismatch_rate', 'orders', 'POST /x', false]]);
    expect(alerts[0]?.summary).toMatch(/^POST \/x \(orders\): /);
  });

  it('judges a window by its own busy minutes, not by busy minutes before it', () => {
    // Busy and healthy until 8 minutes ago, then a trickle under the claims floor: the rules'
    // windows hold no busy minute, so there is nothing to judge and nothing fires (the trickle
    // neither conflicts, mismatches, is rejected nor is slow).
    const trickle = flow(30, (m) => (m <= 7 ? { claims: 5, latency: histogram(2, 5) } : {}));
    expect(names({ ...quiet, flow: trickle })).toEqual([]);
    expect(names({ ...quiet, flowByScope: [{ service: 'demo', scope: 'POST /x', points: trickle }] })).toEqual([]);
    // A busy minute inside the window, over the share, still fires with the trickle around it.
    const burst = flow(30, (m) => (m === 2 ? { conflicts: 50 } : m <= 7 ? { claims: 5, latency: histogram(2, 5) } : {}));
    expect(names({ ...quiet, flow: burst })).toEqual(['conflict_rate']);
  });

  it('needs history covering the whole duration', () => {
    expect(names({ ...quiet, store: store(5, () => ({ estimatedRows: 5_000 })) })).toEqual([]);
  });
});
