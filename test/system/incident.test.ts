// The scripted incident (#15's acceptance): two server processes on one database; tenant A
// sends refunds with concurrent duplicates (about 40% conflicts, original and duplicate on
// different instances) while tenants B and C send clean payments at five times A's rate.
// Within the conflict alert's duration plus one flush interval, the overview API shows a
// conflict alert naming the refunds scope, and its principals table for refunds lists A first
// with counts within the stated bound of the exact ones; the row's link opens A's keys.
// Payments shows no conflict alert. The alert's duration is shortened to its least (1 min,
// ALERT_THRESHOLDS) so the test need not wait five.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTenant } from '../../server/demo/tenants';
import type { OverviewJson } from '../../server/metrics/overview';
import { keysHref } from '../../components/overview/principals-table';
import { useTestDatabase } from '../helpers/database';
import { signInEveryRole } from '../helpers/operators';
import { startServer, type RunningServer } from '../helpers/server';
import { cleanPayments, createPayment, refundsWithDuplicates } from '../helpers/incident';
import { sleep } from '../../packages/store/test/helpers/store';

const FLUSH_SECONDS = 1;
const RATE_MINUTES = 1;
const REFUNDS = 'POST /api/v1/refunds';
const PAYMENTS = 'POST /api/v1/payments';

describe('a scripted incident across two server processes', () => {
  const db = useTestDatabase();
  const servers: RunningServer[] = [];
  let cookie = '';

  beforeAll(async () => {
    const env = {
      DEMO_TRAFFIC: '0',
      METRICS_FLUSH_SECONDS: String(FLUSH_SECONDS),
      ALERT_THRESHOLDS: JSON.stringify({ rateMinutes: RATE_MINUTES, minimumClaimsPerMinute: 10 }),
      // The refund's processor takes its time, so a duplicate meets its original still running.
      DEMO_PROCESSOR_LATENCY_MS: '300',
      DEMO_PROCESSOR_FAILURE_RATE: '0',
    };
    servers.push(await startServer(db.url, env));
    servers.push(await startServer(db.url, env));
    cookie = (await signInEveryRole(db, servers[0]?.baseUrl ?? '', 'incident.example')).get('operator') ?? '';
  }, 240_000);
  afterAll(async () => {
    await Promise.all(servers.map((server) => server.stop()));
  });

  const overview = async (scope: string): Promise<OverviewJson> => {
    const response = await fetch(`${servers[1]?.baseUrl ?? ''}/api/admin/overview?range=1h&service=demo&scope=${encodeURIComponent(scope)}`, { headers: { cookie } });
    expect(response.status).toBe(200);
    return (await response.json()) as OverviewJson;
  };

  it('names the refunds scope and tenant A within the alert duration plus one flush; payments stays clear', { timeout: 180_000 }, async () => {
    const bases = servers.map((server) => server.baseUrl);
    const a = await createTenant(db.pool, 'Tenant A (refunds)');
    const b = await createTenant(db.pool, 'Tenant B');
    const c = await createTenant(db.pool, 'Tenant C');
    const payment = await createPayment(bases[0] ?? '', a, 'incident-payment');
    const started = Date.now();
    // A: 60 refund keys, 100 claims; B and C: 250 clean payments each, five times A's rate.
    const [refunds, paymentsB, paymentsC] = await Promise.all([
      refundsWithDuplicates(bases, a, payment, 60, 'incident-refund'),
      cleanPayments(bases, b, 250, 'incident-b', 5),
      cleanPayments(bases, c, 250, 'incident-c', 5),
    ]);
    const conflicts = refunds.statuses.get(409) ?? 0;
    expect(refunds.sent).toBe(100);
    // Every claim a new key (201), a conflict (409), or now and then a duplicate late enough to be a replay (201).
    expect([...refunds.statuses.keys()].sort()).toEqual(expect.arrayContaining([201, 409]));
    expect((refunds.statuses.get(201) ?? 0) + conflicts).toBe(100);
    // About 40% conflicts (a duplicate that lost no race at all would be a replay, not a conflict).
    expect(conflicts / refunds.sent).toBeGreaterThan(0.3);
    expect(conflicts / refunds.sent).toBeLessThanOrEqual(0.4);
    expect(paymentsB.statuses.get(201)).toBe(250);
    expect(paymentsC.statuses.get(201)).toBe(250);

    const deadline = started + (RATE_MINUTES * 60 + FLUSH_SECONDS) * 1000;
    let refundsView: OverviewJson | undefined;
    let firedAfterMs = Number.POSITIVE_INFINITY;
    for (;;) {
      refundsView = await overview(REFUNDS);
      const top = refundsView.principals.principals[0];
      // The overview's reads run at once on several connections, so a flush can land between the
      // principals' read and the series' (whose totals give the error bound): wait for both.
      const seriesConflicts = Math.round(refundsView.principals.errorBound.conflict * (refundsView.principals.k + 1));
      if (refundsView.alerts.some((alert) => alert.name === 'conflict_rate') && top?.counts.conflict === conflicts && top.counts.claims === refunds.sent && seriesConflicts === conflicts) {
        firedAfterMs = Date.now() - started;
        break;
      }
      if (Date.now() > deadline + 10_000) break;
      await sleep(500);
    }
    // Allowing for this loop's own polling and request time (a few seconds on a loaded machine).
    expect(firedAfterMs).toBeLessThanOrEqual(deadline - started + 5_000);
    const alert = refundsView.alerts.find((candidate) => candidate.name === 'conflict_rate');
    expect(alert).toMatchObject({ service: 'demo', scope: REFUNDS, storeWide: false });
    expect(alert?.summary).toContain(REFUNDS);

    // A first, with counts within the stated bound (N/(k+1)) of the exact ones, never above them.
    const table = refundsView.principals;
    const top = table.principals[0];
    if (!top) throw new Error('no principal listed');
    expect(top.principalId).toBe(a.principalId);
    expect(top.name).toBe('Tenant A (refunds)');
    expect(table.errorBound.conflict).toBeCloseTo(conflicts / (table.k + 1), 5);
    expect(top.counts.conflict).toBeLessThanOrEqual(conflicts);
    expect(conflicts - top.counts.conflict).toBeLessThanOrEqual(table.errorBound.conflict);
    expect(top.counts.claims).toBeLessThanOrEqual(refunds.sent);
    expect(refunds.sent - top.counts.claims).toBeLessThanOrEqual(table.errorBound.claims);
    expect(table.principals.map((row) => row.principalId)).not.toContain(b.principalId);

    // The row's link opens A's keys: /keys with A and the refunds scope filled in, whose list is A's refunds.
    const href = keysHref(top, 'demo', REFUNDS);
    const page = await fetch(`${bases[0] ?? ''}${href}`, { headers: { cookie } });
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain(`value="${a.principalId}"`);
    const url = new URL(href, 'http://x');
    const listed = await fetch(`${bases[0] ?? ''}/api/admin/keys/list`, {
      method: 'POST',
      headers: { cookie, 'content-type': 'application/json', origin: bases[0] ?? '' },
      body: JSON.stringify({
        principalId: url.searchParams.get('principalId'),
        service: url.searchParams.get('service'),
        scope: url.searchParams.get('scope'),
        ...(url.searchParams.get('state') ? { state: url.searchParams.get('state') } : {}),
        reason: 'incident: refunds conflicts',
        limit: 100,
      }),
    });
    expect(listed.status).toBe(200);
    const keys = ((await listed.json()) as { keys: { key: string }[] }).keys.map((key) => key.key);
    expect(new Set(keys)).toEqual(new Set(Array.from({ length: 60 }, (_, i) => `incident-refund-${i}`)));

    // Payments: busy and clean, so no conflict alert, and nobody behind any trouble.
    const paymentsView = await overview(PAYMENTS);
    expect(paymentsView.alerts.filter((candidate) => candidate.name === 'conflict_rate')).toEqual([]);
    expect(paymentsView.principals.principals).toEqual([]);
    expect(paymentsView.flow.reduce((sum, point) => sum + point.claims, 0)).toBeGreaterThanOrEqual(501);
  });
});
