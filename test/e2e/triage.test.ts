// Incident triage in Chromium (#15 points 5 to 12), in light and dark, at 1440 px and 390 px,
// with axe-core run on every page state visited: banners with value, threshold, scope and
// link; the checks that passed; URL state corrected and kept in history; honest charts; the
// audit log as a change log; policy editing in operator units; phone-width pages; and the
// small things (dialog focus, quiet "Last updated", ended sessions, lease passed, 404).
// Screenshots go to artifacts/screenshots/triage-*.
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { beforeAll, describe, expect, it } from 'vitest';
import { hasChromium, SCREENSHOTS_DIR } from '../helpers/browser';
import { expectAccessible } from '../helpers/axe';
import { useTestDatabase } from '../helpers/database';
import { rebuildSeries } from '../../server/metrics/series';
import { closeChecked, useSignedInBrowser } from '../helpers/signed-in-browser';

const variants = [
  { name: 'light-1440', colorScheme: 'light', width: 1440, height: 900 },
  { name: 'dark-1440', colorScheme: 'dark', width: 1440, height: 900 },
  { name: 'light-390', colorScheme: 'light', width: 390, height: 844 },
  { name: 'dark-390', colorScheme: 'dark', width: 390, height: 844 },
] as const;
type Variant = (typeof variants)[number];

const REFUNDS = 'POST /api/v1/refunds';
const PAYMENTS = 'POST /api/v1/payments';
const TENANT = '6f1c2d3e-4b5a-4c6d-8e9f-0a1b2c3d4e5f';

/** What sticks out past the viewport's right edge when the page scrolls sideways (nothing, when it does not). */
async function overflowing(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const width = document.documentElement.clientWidth;
    if (document.documentElement.scrollWidth <= width) return [];
    return [...document.querySelectorAll('body *')]
      .filter((element) => element.getBoundingClientRect().right > width + 1 && !element.closest('.table-scroll'))
      .slice(0, 8)
      .map((element) => `${element.tagName.toLowerCase()}.${element.getAttribute('class') ?? ''} right=${Math.round(element.getBoundingClientRect().right)}`);
  });
}

async function shot(page: Page, name: string, variant: Variant): Promise<void> {
  await page.screenshot({ path: join(SCREENSHOTS_DIR, `triage-${name}-${variant.name}.png`), fullPage: true });
}

describe.skipIf(!hasChromium)('incident triage in Chromium', () => {
  const db = useTestDatabase();
  const ui = useSignedInBrowser(db, { domain: 'triage.example', env: { DEMO_TRAFFIC: '0', METRICS_FLUSH_SECONDS: '1' } });

  /** The last seven minutes of refunds at 40% conflicts beside clean payments at five times the rate (again before each overview test: time moves on). */
  async function seedIncident(): Promise<void> {
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', 'demo', s, o, c
       FROM generate_series(0, 7) AS m, (VALUES ('${REFUNDS}', 'new', 60), ('${REFUNDS}', 'conflict', 40),
                                              ('${PAYMENTS}', 'new', 450), ('${PAYMENTS}', 'replay', 50)) AS t(s, o, c)
       ON CONFLICT (minute, service, scope, outcome) DO UPDATE SET count = excluded.count;
       INSERT INTO claim_latency_minute (minute, service, scope, bucket, count)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', 'demo', s, 10, 100 FROM generate_series(0, 7) AS m, (VALUES ('${REFUNDS}'), ('${PAYMENTS}')) AS t(s)
       ON CONFLICT DO NOTHING`,
    );
    // The overview's series as the flush writes them beside those buckets.
    await rebuildSeries(db.pool);
  }

  beforeAll(async () => {
    // A refund claim whose handler died three minutes ago.
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
       VALUES ('${TENANT}', 'demo', '${REFUNDS}', 'refund-crashed-e2e', 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), now() - interval '3 minutes', now() + interval '1 day')`,
    );
  });

  /** An in-progress key of TENANT whose lease passed two minutes ago. */
  async function crashedKey(key: string): Promise<void> {
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
       VALUES ($1, 'demo', $2, $3, 'in_progress', decode(repeat('cd', 32), 'hex'), gen_random_uuid(), now() - interval '2 minutes', now() + interval '1 day')`,
      [TENANT, REFUNDS, key],
    );
  }

  async function pageFor(role: Parameters<typeof ui.pageAs>[0], variant: Variant): Promise<Page> {
    const page = await ui.pageAs(role);
    await page.setViewportSize({ width: variant.width, height: variant.height });
    await page.emulateMedia({ colorScheme: variant.colorScheme });
    return page;
  }

  for (const variant of variants) {
    it(`overview: banners say value, threshold, scope and where to act; unknown URL values are corrected (${variant.name})`, { timeout: 90_000 }, async () => {
      const base = ui.baseUrl;
      await seedIncident();
      const page = await pageFor('viewer', variant);
      await page.goto(`${base}/?range=1h&service=demo&scope=${encodeURIComponent(REFUNDS)}`);
      const banner = page.getByRole('article', { name: `Conflict share: Scope ${REFUNDS} of demo` });
      await banner.waitFor();
      await expect(banner.textContent()).resolves.toMatch(/Now 40%, threshold over 10% for 5 min · since/);
      const principals = banner.getByRole('link', { name: 'Principals behind it →' });
      const href = new URL((await principals.getAttribute('href')) ?? '', base);
      expect(href.pathname).toBe('/');
      expect(href.hash).toBe('#principals');
      expect(href.searchParams.get('scope')).toBe(REFUNDS);
      expect(href.searchParams.get('range')).toBe('1h');
      // The stale claim counts for refunds; the store panels say they are store-wide.
      await expect(page.getByText(`Stale claims in ${REFUNDS} of demo`).isVisible()).resolves.toBe(true);
      await page.getByRole('figure', { name: 'Store size (store-wide)' }).waitFor();
      // Honest charts: the objective as a threshold line, the time zone named.
      const latency = page.getByRole('figure', { name: 'Claim latency' });
      await latency.getByText('p99 objective 50 ms').waitFor();
      await page.getByText(/times in America\/New_York/).waitFor();
      await page.getByRole('figure', { name: 'Share of claims' }).getByText('conflict alert 10%').waitFor();
      expect(await overflowing(page)).toEqual([]);
      await expectAccessible(page, `overview, refunds (${variant.name})`);
      await shot(page, 'overview-refunds', variant);

      // Payments: no conflict alert; the passed checks list its current value.
      await page.getByRole('combobox', { name: 'Scope', exact: true }).selectOption(PAYMENTS);
      await page.waitForURL((url) => url.searchParams.get('scope') === PAYMENTS);
      await page.getByText('No alert is firing').waitFor();
      const passed = page.getByRole('table', { name: 'Checks that passed, with their current values' });
      await expect(passed.getByRole('row').filter({ hasText: 'Conflict share' }).textContent()).resolves.toContain('0%');
      await expectAccessible(page, `overview, payments (${variant.name})`);
      await shot(page, 'overview-payments', variant);
      // The scope change was a history entry: Back returns to refunds.
      await page.goBack();
      await page.waitForURL((url) => url.searchParams.get('scope') === REFUNDS);
      await banner.waitFor();

      // An unknown scope and range: said, and the address corrected.
      await page.goto(`${base}/?range=2y&service=demo&scope=POST%20%2Fnowhere`);
      await page.getByText('There is no time range "2y": showing the last hour.').waitFor();
      await page.getByText('There is no scope "POST /nowhere": showing all scopes of demo.').waitFor();
      await page.waitForURL((url) => url.searchParams.get('range') === '1h' && !url.searchParams.has('scope'));
      await expectAccessible(page, `overview, corrected URL (${variant.name})`);
      await shot(page, 'overview-corrected', variant);
      await closeChecked(page);
    });

    it(`claims and keys at any width: rows readable, actions reachable, the dialog focuses its reason; a passed lease offers Release (${variant.name})`, { timeout: 90_000 }, async () => {
      const base = ui.baseUrl;
      const page = await pageFor('operator', variant);
      await page.goto(`${base}/claims`);
      const release = page.getByRole('button', { name: 'Release refund-crashed-e2e' });
      await release.waitFor();
      // Reachable without scrolling sideways: inside the viewport's width.
      const box = await release.boundingBox();
      expect((box?.x ?? -1) >= 0 && (box?.x ?? 0) + (box?.width ?? 0) <= variant.width).toBe(true);
      expect(await overflowing(page)).toEqual([]);
      await expectAccessible(page, `stale claims (${variant.name})`);
      await shot(page, 'claims', variant);
      await release.click();
      const dialog = page.getByRole('dialog', { name: 'Release this claim?' });
      await dialog.waitFor();
      await expect.poll(() => page.evaluate(() => document.activeElement?.id)).toBe('release-reason');
      await expectAccessible(page, `stale claims, release dialog (${variant.name})`);
      await dialog.getByRole('button', { name: 'Cancel' }).click();
      // "Last updated" is not a live region: it would be announced on every refresh.
      await expect(page.locator('[aria-live]').filter({ hasText: 'Last updated' }).count()).resolves.toBe(0);

      // /keys: an in-progress key whose lease has passed says so, and offers the audited release.
      const key = `lease-passed-${variant.name}`;
      await crashedKey(key);
      await page.goto(`${base}/keys?${new URLSearchParams({ principalId: TENANT, key }).toString()}`);
      await page.getByLabel('Reason').first().fill('customer reports a stuck refund');
      await page.getByRole('button', { name: 'Look up' }).click();
      const record = page.getByRole('article', { name: `Record in ${REFUNDS} of demo` });
      await record.getByText(/Lease passed 2(\.\d)? min ago/).waitFor();
      await expectAccessible(page, `key lookup, lease passed (${variant.name})`);
      await shot(page, 'keys-lease-passed', variant);
      await record.getByRole('button', { name: 'Release' }).click();
      const confirm = page.getByRole('dialog', { name: 'Release this claim?' });
      await confirm.waitFor();
      await expect.poll(() => page.evaluate(() => (document.activeElement as HTMLInputElement | null)?.name)).toBe('reason');
      await expectAccessible(page, `key lookup, release dialog (${variant.name})`);
      await page.keyboard.type('processor says the refund never ran');
      await confirm.getByRole('button', { name: 'Release claim' }).click();
      // Released, and the lookup read again: the key is failed (retryable) now.
      await record.getByText('failed (retryable)').waitFor();
      const { rows } = await db.pool.query<{ state: string }>('SELECT state FROM idempotency_keys WHERE key = $1', [key]);
      expect(rows).toEqual([{ state: 'failed' }]);
      await closeChecked(page);
    });

    it(`policy editing speaks units and previews the margin; the audit log reads like a change log (${variant.name})`, { timeout: 90_000 }, async () => {
      const base = ui.baseUrl;
      const admin = await pageFor('admin', variant);
      await admin.goto(`${base}/retention`);
      await admin.getByRole('button', { name: `Edit ${PAYMENTS} of demo` }).click();
      const dialog = admin.getByRole('dialog', { name: `Edit ${PAYMENTS} (demo)` });
      await dialog.getByLabel('Retention applied (hours)').fill('12');
      const preview = dialog.locator('output');
      await expect(preview.textContent()).resolves.toContain('This will be refused: retention must be at least the 24 h retry window (12 h short).');
      await dialog.getByLabel('Reason').fill('save disk space');
      await dialog.getByRole('button', { name: 'Save policy' }).click();
      await dialog.getByRole('alert').filter({ hasText: 'Retention must be at least the 24 h retry window (12 h would delete keys while clients may still retry).' }).waitFor();
      await expectAccessible(admin, `policy edit, refused (${variant.name})`);
      await shot(admin, 'policy-refused', variant);
      const current = await db.pool.query<{ retention_seconds: number }>("SELECT retention_seconds FROM endpoint_policies WHERE service = 'demo' AND endpoint = $1", [PAYMENTS]);
      const next = (current.rows[0]?.retention_seconds ?? 0) / 3_600 + 1;
      await dialog.getByLabel('Retention applied (hours)').fill(String(next));
      await expect(preview.textContent()).resolves.toContain(`Margin ${next - 24} h`);
      await dialog.getByRole('button', { name: 'Save policy' }).click();
      await admin.getByRole('status').filter({ hasText: `Saved the policy of ${PAYMENTS}` }).waitFor();
      expect(await overflowing(admin)).toEqual([]);
      await expectAccessible(admin, `retention review (${variant.name})`);
      await shot(admin, 'retention', variant);

      await admin.goto(`${base}/audit?action=policy.&signIns=hide`);
      const table = admin.getByRole('table', { name: 'Audit entries, newest first' });
      const changed = table.getByRole('row').filter({ hasText: 'policy.change' }).filter({ hasNotText: 'refused' }).first();
      await expect(changed.getByRole('list', { name: 'Changed fields' }).textContent()).resolves.toBe(`Retention ${next - 1} h → ${next} h`);
      await expect(changed.getByText('Not breaking').isVisible()).resolves.toBe(true);
      const refused = table.getByRole('row').filter({ hasText: 'policy.change_refused' }).first();
      await expect(refused.getByText('Refused: Retention must be at least the 24 h retry window').isVisible()).resolves.toBe(true);
      await expect(table.getByText('auth.sign_in').count()).resolves.toBe(0);
      await expect(admin.getByLabel('Hide sign-ins and sign-outs').isChecked()).resolves.toBe(true);
      await expect(admin.locator('#audit-actions option[value="policy."]').count()).resolves.toBe(1);
      await expectAccessible(admin, `audit log, policy changes (${variant.name})`);
      await shot(admin, 'audit', variant);
      await closeChecked(admin);
    });

    it(`a 404 with a way back, and an ended session that says so and stops refreshing (${variant.name})`, { timeout: 90_000 }, async () => {
      const base = ui.baseUrl;
      const page = await pageFor('viewer', variant);
      const missing = await page.goto(`${base}/no-such-page`);
      expect(missing?.status()).toBe(404);
      await page.getByRole('heading', { name: 'Page not found' }).waitFor();
      await expect(page.getByRole('link', { name: 'Back to the overview' }).getAttribute('href')).resolves.toBe('/');
      await expectAccessible(page, `404 (${variant.name})`);
      await shot(page, '404', variant);

      await page.goto(`${base}/?range=1h&refresh=10`);
      await page.getByRole('button', { name: 'Refresh now' }).waitFor();
      const asked: string[] = [];
      page.on('request', (request) => {
        if (request.url().includes('/api/admin/overview')) asked.push(request.url());
      });
      await page.context().clearCookies();
      await page.getByRole('button', { name: 'Refresh now' }).click();
      const ended = page.getByRole('alert').filter({ hasText: 'Your session has ended.' });
      await ended.waitFor();
      expect(new URL((await ended.getByRole('link', { name: 'Sign in again' }).getAttribute('href')) ?? '', base).searchParams.get('next')).toBe('/?range=1h&refresh=10');
      await expectAccessible(page, `overview, session ended (${variant.name})`);
      await shot(page, 'session-ended', variant);
      if (variant.name === 'light-1440') {
        // Auto-refresh (every 10 s) has stopped: nothing more is asked.
        const before = asked.length;
        await new Promise((resolve) => setTimeout(resolve, 12_000));
        expect(asked.length).toBe(before);
      }
      await closeChecked(page);
    });
  }
});
