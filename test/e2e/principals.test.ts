// The principals table in Chromium: a tenant whose refunds meet concurrent duplicates heads
// "Principals behind conflicts, mismatches, rejections and stale claims" for the refunds scope,
// its row links to its keys on /keys (principal and scope filled in), and /keys finds a
// principal by name prefix and a request by its correlation id (audited).
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createTenant } from '../../server/demo/tenants';
import { hasChromium, SCREENSHOTS_DIR } from '../helpers/browser';
import { useTestDatabase } from '../helpers/database';
import { closeChecked, useSignedInBrowser } from '../helpers/signed-in-browser';
import { cleanPayments, createPayment, refundsWithDuplicates } from '../helpers/incident';
import { sleep } from '../../packages/store/test/helpers/store';

describe.skipIf(!hasChromium)('the principals table and principal search in Chromium', () => {
  const db = useTestDatabase();
  const ui = useSignedInBrowser(db, {
    domain: 'principals-ui.example',
    env: { DEMO_TRAFFIC: '0', METRICS_FLUSH_SECONDS: '1', DEMO_PROCESSOR_LATENCY_MS: '400', DEMO_PROCESSOR_FAILURE_RATE: '0' },
  });

  it('lists the tenant behind the conflicts first and links to its keys', { timeout: 120_000 }, async () => {
    const base = ui.baseUrl;
    const a = await createTenant(db.pool, 'Refundly Ltd');
    const b = await createTenant(db.pool, 'Calm Payments Inc');
    const payment = await createPayment(base, a, 'ui-incident-payment');
    const [refunds] = await Promise.all([refundsWithDuplicates([base], a, payment, 15, 'ui-refund'), cleanPayments([base], b, 30, 'ui-pay')]);
    expect(refunds.statuses.get(409)).toBeGreaterThan(0);
    const page = await ui.pageAs('operator');
    const scope = 'POST /api/v1/refunds';
    const table = page.getByRole('region', { name: 'Principals behind conflicts, mismatches, rejections and stale claims' });
    const rows = table.locator('tbody tr');
    const firstConflicts = async () => ((await rows.count()) > 0 ? Number(await rows.first().locator('td').first().textContent()) : 0);
    // Until the last flush (every second) is in.
    for (let attempt = 0; attempt < 20; attempt += 1) {
      await page.goto(`${base}/?range=1h&service=demo&scope=${encodeURIComponent(scope)}`);
      await table.waitFor();
      if ((await firstConflicts()) === refunds.statuses.get(409)) break;
      await sleep(1_000);
    }
    await expect(page.locator('#principals').getAttribute('aria-labelledby')).resolves.toBe('principals-heading');
    await expect(rows.first().locator('th').textContent()).resolves.toContain('Refundly Ltd');
    await expect(rows.first().locator('th').textContent()).resolves.toContain(a.principalId);
    // Its conflicts as sent (within the summary's bound, which is 0 here: one principal in the scope).
    expect(await firstConflicts()).toBe(refunds.statuses.get(409));
    await expect(table.textContent()).resolves.not.toContain('Calm Payments');
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'overview-principals.png'), fullPage: true });
    await page.getByRole('link', { name: 'Keys of Refundly Ltd' }).click();
    await page.waitForURL((url) => url.pathname === '/keys' && url.searchParams.get('principalId') === a.principalId);
    await expect(page.getByLabel('Principal ID').inputValue()).resolves.toBe(a.principalId);
    await expect(page.getByLabel('Scope').inputValue()).resolves.toBe(scope);
    await page.getByLabel('Reason').fill('incident: refunds conflicts');
    await page.getByRole('button', { name: 'List keys' }).click();
    await page.getByRole('button', { name: 'Look up ui-refund-0', exact: true }).waitFor();
    const keys = await page.getByRole('table', { name: 'Live keys of the principal, newest first' }).locator('tbody tr td.key-cell').allTextContents();
    expect(new Set(keys)).toEqual(new Set(Array.from({ length: 15 }, (_, i) => `ui-refund-${i}`)));
    await closeChecked(page);
  });

  it('finds a principal by name prefix and a request by its correlation id on /keys', { timeout: 60_000 }, async () => {
    const base = ui.baseUrl;
    const tenant = await createTenant(db.pool, 'Zebra Foods');
    const created = await fetch(`${base}/api/v1/payments`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.apiKey}`, 'idempotency-key': 'zebra-1', 'content-type': 'application/json' },
      body: JSON.stringify({ amount: 4_200, currency: 'EUR' }),
    });
    expect(created.status).toBe(201);
    const correlationId = created.headers.get('x-correlation-id') ?? '';
    const page = await ui.pageAs('operator');
    await page.goto(`${base}/keys`);
    await page.getByLabel('Principal name').fill('zeB');
    await page.getByRole('button', { name: 'Find principals' }).click();
    await page.getByRole('button', { name: 'Use Zebra Foods' }).click();
    await expect(page.getByLabel('Principal ID').inputValue()).resolves.toBe(tenant.principalId);
    await page.getByLabel('Principal ID').fill('');
    await page.getByLabel('Reason').fill('customer quoted a correlation id');
    await page.getByRole('textbox', { name: 'Correlation id' }).fill(correlationId);
    await page.getByRole('button', { name: 'Find request' }).click();
    const found = page.getByRole('article', { name: `Request ${correlationId}` });
    await found.waitFor();
    await expect(found.textContent()).resolves.toMatch(/Zebra Foods[\s\S]*demo, POST \/api\/v1\/payments[\s\S]*zebra-1[\s\S]*completed, status 201/);
    await found.getByRole('button', { name: 'Show this key and its principal' }).click();
    await page.getByRole('article', { name: 'Record in POST /api/v1/payments' }).waitFor();
    await expect(page.getByLabel('Principal ID').inputValue()).resolves.toBe(tenant.principalId);
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'keys-correlation.png'), fullPage: true });
    const { rows } = await db.pool.query<{ action: string; target: { correlationId?: string } }>(
      "SELECT action, target FROM audit_log WHERE action IN ('key.correlation_lookup', 'key.lookup') AND actor = 'operator@principals-ui.example' ORDER BY id",
    );
    expect(rows.map((row) => row.action)).toEqual(['key.correlation_lookup', 'key.lookup']);
    expect(rows[0]?.target.correlationId).toBe(correlationId);
    await closeChecked(page);
  });
});
