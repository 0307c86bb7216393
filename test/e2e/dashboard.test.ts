// The dashboard in Chromium against the built server with demo traffic: what each role sees,
// the overview filling up, the time range in the URL, a key lookup that shows metadata and
// never the response, and a generator-made stale claim released from the UI and audited.
// Screenshots of every page go to artifacts/screenshots.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createTenant } from '../../server/demo/tenants';
import { ensurePolicies } from '../../server/retention/policies';
import type { OperatorRole } from '../../server/auth/roles';
import { hasChromium, SCREENSHOTS_DIR } from '../helpers/browser';
import { expectAccessible } from '../helpers/axe';
import { useTestDatabase } from '../helpers/database';
import { closeChecked, useSignedInBrowser } from '../helpers/signed-in-browser';
import { sleep } from '../../packages/store/test/helpers/store';

const SENTINEL = 'SENTINEL-ui-93be';
/** Another service beside the demo, for the Service pickers of /claims and /retention. */
const ORDERS_POLICY = { 'POST /orders': { scopeMode: 'endpoint' as const, retryWindowSeconds: 3_600, retentionSeconds: 7_200, leaseMs: 10_000, lockTimeoutMs: 1_000, maxResponseBytes: 4_096, liveKeyQuota: 1_000 } };

describe.skipIf(!hasChromium)('the dashboard in Chromium', () => {
  const db = useTestDatabase();
  const ui = useSignedInBrowser(db, { domain: 'ui.example', env: { DEMO_TRAFFIC: '1', METRICS_FLUSH_SECONDS: '1', SWEEP_INTERVAL_SECONDS: '3' } });
  const pageAs = (role: OperatorRole) => ui.pageAs(role);

  it('shows each role its pages and refuses the ones above it', async () => {
    const base = ui.baseUrl;
    const viewer = await pageAs('viewer');
    await viewer.goto(base);
    const nav = viewer.getByRole('navigation', { name: 'Dashboard' });
    await expect(nav.getByRole('link').allTextContents()).resolves.toEqual(['Overview']);
    const refused = await viewer.goto(`${base}/keys`);
    expect(refused?.status()).toBe(403);
    await expect(viewer.getByRole('heading', { name: 'Not allowed' }).isVisible()).resolves.toBe(true);
    await expectAccessible(viewer, 'forbidden.png');
    await viewer.screenshot({ path: join(SCREENSHOTS_DIR, 'forbidden.png') });
    await viewer.close();
    const operator = await pageAs('operator');
    await operator.goto(base);
    await expect(operator.getByRole('navigation', { name: 'Dashboard' }).getByRole('link').allTextContents()).resolves.toEqual(['Overview', 'Key lookup', 'Stale claims']);
    await closeChecked(operator);
  }, 120_000); // four roles' pages in Chromium: 30 s was short on a loaded CI machine

  it('fills every overview panel from the demo traffic, and the time range lives in the URL', { timeout: 90_000 }, async () => {
    const page = await pageAs('viewer');
    const base = ui.baseUrl;
    // Claims flush every second and the first store sample is taken 5 s after boot.
    for (let attempt = 0; attempt < 30; attempt += 1) {
      await page.goto(`${base}/?range=1h&refresh=10`);
      if ((await page.getByText(/No claims in this range|No store sample/).count()) === 0) break;
      await sleep(2_000);
    }
    await expect(page.getByText(/No claims in this range|No store sample/).count()).resolves.toBe(0);
    for (const title of ['Store rows against the baseline', 'Store size', 'Claim latency', 'Replays, conflicts and mismatches per second', 'Share of claims', 'Cleanup health']) {
      const chart = page.getByRole('figure', { name: title });
      await chart.locator('svg.recharts-surface').first().waitFor();
    }
    await expect(page.getByRole('table', { name: 'Stored responses per scope' }).getByText('POST /api/v1/payments').isVisible()).resolves.toBe(true);
    // Capacity: the unique index against the database's memory (here shared_buffers alone) and the steady state.
    await expect(page.getByText('Unique index against memory', { exact: true }).isVisible()).resolves.toBe(true);
    await expect(page.getByText(/% \(shared_buffers only; the check fires over 80%\)/).isVisible()).resolves.toBe(true);
    await expect(page.getByText('Steady state', { exact: true }).isVisible()).resolves.toBe(true);
    await expectAccessible(page, 'overview.png');
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'overview.png'), fullPage: true });
    await page.getByLabel('Time range').selectOption('6h');
    await page.waitForURL((url) => url.searchParams.get('range') === '6h');
    await page.getByText('in steps of 5.0 min').waitFor();
    // 30 days in 6-hour steps: a fresh server's claims are all in one step, the current one, and
    // a lone point has no segment to draw; the chart marks it with a dot rather than look empty.
    await page.getByLabel('Time range').selectOption('30d');
    await page.waitForURL((url) => url.searchParams.get('range') === '30d');
    const latency = page.getByRole('figure', { name: 'Claim latency' });
    await latency.locator('svg.recharts-surface').first().waitFor();
    const drawn = async () => {
      const segments = await latency.locator('path.recharts-curve').evaluateAll((paths) => paths.filter((path) => /L/.test(path.getAttribute('d') ?? '')).length);
      return segments + (await latency.locator('circle.chart-lone-point').count());
    };
    await expect(drawn()).resolves.toBeGreaterThan(0);
    await closeChecked(page);
  });

  it('looks up a payment by its key: metadata shown, the response never sent to the browser', async () => {
    const base = ui.baseUrl;
    const tenant = await createTenant(db.pool, 'UI Sentinel GmbH');
    const created = await fetch(`${base}/api/v1/payments`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.apiKey}`, 'idempotency-key': 'ui-order-1', 'content-type': 'application/json' },
      body: JSON.stringify({ amount: 990, currency: 'EUR', description: SENTINEL }),
    });
    expect(created.status).toBe(201);
    const later = await fetch(`${base}/api/v1/payments`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.apiKey}`, 'idempotency-key': 'ui-order-2', 'content-type': 'application/json' },
      body: JSON.stringify({ amount: 120, currency: 'EUR', description: 'second order' }),
    });
    expect(later.status).toBe(201);
    const page = await pageAs('operator');
    const bodies: Promise<string>[] = [];
    page.on('response', (response) => bodies.push(response.text().catch(() => '')));
    await page.goto(`${base}/keys`);
    await page.getByLabel('Principal ID').fill(tenant.principalId);
    await page.getByLabel('Idempotency key').fill('ui-order-1');
    await page.getByLabel('Reason').fill('customer asks whether the payment went through');
    await page.getByRole('button', { name: 'Look up' }).click();
    const record = page.getByRole('article', { name: 'Record in POST /api/v1/payments' });
    await record.waitFor();
    await expect(record.textContent()).resolves.toMatch(/completed[\s\S]*201[\s\S]*application\/json/);
    await page.getByRole('button', { name: 'List keys' }).click();
    await page.getByRole('button', { name: 'Look up ui-order-1' }).waitFor();
    // Newest first: the later payment heads the list.
    const listed = page.getByRole('table', { name: 'Live keys of the principal, newest first' }).locator('tbody tr td.key-cell');
    await expect(listed.allTextContents()).resolves.toEqual(['ui-order-2', 'ui-order-1']);
    await expectAccessible(page, 'keys.png');
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'keys.png'), fullPage: true });
    expect(await page.content()).not.toContain(SENTINEL);
    for (const body of await Promise.all(bodies)) expect(body).not.toContain(SENTINEL);
    const { rows } = await db.pool.query<{ actor: string; action: string; reason: string }>("SELECT actor, action, reason FROM audit_log WHERE action IN ('key.lookup', 'key.list') ORDER BY id");
    expect(rows).toEqual([
      { actor: 'operator@ui.example', action: 'key.lookup', reason: 'customer asks whether the payment went through' },
      { actor: 'operator@ui.example', action: 'key.list', reason: 'customer asks whether the payment went through' },
    ]);
    await closeChecked(page);
  });

  it('releases a stale claim the generator left behind, and the audit log shows it', { timeout: 90_000 }, async () => {
    const base = ui.baseUrl;
    const page = await pageAs('operator');
    // The generator's first crashed refund handler runs ~2 s after traffic starts; its lease is 30 s.
    const release = page.getByRole('button', { name: /^Release refund-crashed-/ });
    for (let attempt = 0; attempt < 40; attempt += 1) {
      await page.goto(`${base}/claims`);
      if ((await release.count()) > 0) break;
      await sleep(2_000);
    }
    await expectAccessible(page, 'claims.png');
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'claims.png'), fullPage: true });
    const label = (await release.first().getAttribute('aria-label')) ?? '';
    const key = label.replace(/^Release /, '');
    await expect(page.getByRole('link', { name: `Look up ${key}` }).getAttribute('href')).resolves.toContain(`key=${encodeURIComponent(key)}`);
    await release.first().click();
    const dialog = page.getByRole('dialog', { name: 'Release this claim?' });
    await dialog.getByLabel('Reason').fill('demo: the refund handler crashed');
    await expectAccessible(page, 'claims-release.png');
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'claims-release.png') });
    await dialog.getByRole('button', { name: 'Release claim' }).click();
    await page.getByRole('status').filter({ hasText: `Released ${key}` }).waitFor();
    const { rows } = await db.pool.query<{ actor: string; reason: string; target: { key: string } }>("SELECT actor, reason, target FROM audit_log WHERE action = 'stale_claim.release'");
    expect(rows).toEqual([{ actor: 'operator@ui.example', reason: 'demo: the refund handler crashed', target: expect.objectContaining({ service: 'demo', key }) as unknown }]);

    // The Service picker: one service's stale claims, in the URL, Back returns to every service;
    // a service no policy names is said so and the address corrected.
    await ensurePolicies(db.pool, 'orders', ORDERS_POLICY, 'system');
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, created_at, expires_at)
       SELECT gen_random_uuid(), service, scope, key, 'in_progress', decode(repeat('cd', 32), 'hex'), gen_random_uuid(),
              now() - interval '1 minute', now() - interval '2 minutes', now() + interval '2 hours'
       FROM (VALUES ('orders', 'POST /orders', 'order-crashed'), ('demo', 'POST /api/v1/refunds', 'demo-crashed')) AS v(service, scope, key)`,
    );
    const ordersClaim = page.getByRole('button', { name: 'Release order-crashed' });
    const demoClaim = page.getByRole('button', { name: 'Release demo-crashed' });
    await page.goto(`${base}/claims`);
    await ordersClaim.waitFor();
    await demoClaim.waitFor();
    await page.getByLabel('Service').selectOption('orders');
    await page.waitForURL((url) => url.searchParams.get('service') === 'orders');
    await demoClaim.waitFor({ state: 'detached' });
    await expect(ordersClaim.isVisible()).resolves.toBe(true);
    await expect(release.count()).resolves.toBe(0);
    await expectAccessible(page, 'stale claims of one service');
    await page.goBack();
    await page.waitForURL((url) => !url.searchParams.has('service'));
    await demoClaim.waitFor();
    await expect(ordersClaim.isVisible()).resolves.toBe(true);
    await page.goto(`${base}/claims?service=nobody`);
    await page.getByText('There is no service "nobody": showing all services. The address has been corrected.').waitFor();
    await page.waitForURL((url) => !url.searchParams.has('service'));
    await closeChecked(page);
  });

  it('reviews retention with the sweeper evidence, exports it, and refuses a retention below the window', { timeout: 60_000 }, async () => {
    const base = ui.baseUrl;
    // Keys past their expiry, for the sweeper (every 3 s here) to delete with evidence.
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, response_status, response_content_type,
         response_ref, completed_at, created_at, expires_at)
       SELECT gen_random_uuid(), 'demo', 'POST /api/v1/payments', 'expired-' || i, 'completed', decode(repeat('cd', 32), 'hex'), gen_random_uuid(),
              201, 'application/json', 'pay_x', now() - interval '27 hours', now() - interval '27 hours', now() - interval '1 hour'
       FROM generate_series(1, 40) AS i`,
    );
    // Another service's policy beside the demo's two (the stale-claims test may have made it already).
    await ensurePolicies(db.pool, 'orders', ORDERS_POLICY, 'system');
    const compliance = await pageAs('compliance');
    for (let attempt = 0; attempt < 20; attempt += 1) {
      await compliance.goto(`${base}/retention`);
      if ((await compliance.getByText(/POST \/api\/v1\/payments \(demo\): youngest/).count()) > 0) break;
      await sleep(1_000);
    }
    const policies = compliance.getByRole('region', { name: 'Policies against their promise' });
    await expect(policies.getByText('Pass').count()).resolves.toBe(3);
    await expect(compliance.getByText(/POST \/api\/v1\/payments \(demo\): youngest \d+(\.\d)? h old, window 24 h, margin/).first().isVisible()).resolves.toBe(true);
    await expect(compliance.getByRole('button', { name: /^Edit / }).count()).resolves.toBe(0);
    await expectAccessible(compliance, 'retention.png');
    await compliance.screenshot({ path: join(SCREENSHOTS_DIR, 'retention.png'), fullPage: true });
    const download = compliance.waitForEvent('download');
    await compliance.getByRole('button', { name: 'Export sweeper evidence (CSV)' }).click();
    const file = await (await download).path();
    const csv = await readFile(file, 'utf8');
    expect(csv.split('\r\n')[0]).toBe('run_id,started_at,finished_at,trigger,status,service,scope,rows_deleted,min_age_at_deletion_seconds,retry_window_seconds,min_margin_seconds,max_past_expiry_at_deletion_seconds');
    expect(csv).toContain('POST /api/v1/payments');
    const exports = await db.pool.query<{ actor: string }>("SELECT actor FROM audit_log WHERE action = 'retention.export'");
    expect(exports.rows).toEqual([{ actor: 'compliance@ui.example' }]);

    // The Service picker: one service's review, in the URL, Back returns to every service; a
    // service no policy names is said so and the address corrected.
    await compliance.getByLabel('Service').selectOption('orders');
    await compliance.waitForURL((url) => url.searchParams.get('service') === 'orders');
    await policies.getByRole('cell', { name: 'POST /orders' }).waitFor();
    await expect(policies.getByText('Pass').count()).resolves.toBe(1);
    await expect(policies.getByRole('cell', { name: 'POST /api/v1/payments' }).count()).resolves.toBe(0);
    await expect(compliance.getByRole('region', { name: 'Sweeper runs and their evidence' }).getByText(/No sweep has deleted anything yet/).isVisible()).resolves.toBe(true);
    // How expired keys leave this (plain-layout) store, for the reviewer.
    await expect(compliance.getByTestId('expiry-removal').textContent()).resolves.toMatch(/^How expired keys leave: the sweeper deletes them in bounded chunks/);
    await expectAccessible(compliance, 'retention of one service');
    await compliance.goBack();
    await compliance.waitForURL((url) => !url.searchParams.has('service'));
    await policies.getByRole('cell', { name: 'POST /api/v1/payments' }).waitFor();
    await expect(policies.getByText('Pass').count()).resolves.toBe(3);
    await compliance.goto(`${base}/retention?service=nobody`);
    await compliance.getByText('There is no service "nobody": showing all services. The address has been corrected.').waitFor();
    await compliance.waitForURL((url) => !url.searchParams.has('service'));
    await closeChecked(compliance);

    const admin = await pageAs('admin');
    await admin.goto(`${base}/retention`);
    await admin.getByRole('button', { name: 'Edit POST /api/v1/payments' }).click();
    const dialog = admin.getByRole('dialog', { name: 'Edit POST /api/v1/payments' });
    await dialog.getByLabel('Retention applied (hours)').fill('12');
    await dialog.getByLabel('Reason').fill('save disk space');
    await dialog.getByRole('button', { name: 'Save policy' }).click();
    await dialog.getByRole('alert').filter({ hasText: 'Retention must be at least the 24 h retry window' }).waitFor();
    await expectAccessible(admin, 'retention-refused.png');
    await admin.screenshot({ path: join(SCREENSHOTS_DIR, 'retention-refused.png') });
    const { rows } = await db.pool.query<{ retention_seconds: number; version: number }>("SELECT retention_seconds, version FROM endpoint_policies WHERE endpoint = 'POST /api/v1/payments'");
    expect(rows).toEqual([{ retention_seconds: 93_600, version: 1 }]);
    await closeChecked(admin);
  });
});
