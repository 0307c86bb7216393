// The audit log and operators pages in Chromium against the built server: which roles see
// them, audit filters in the URL with keyset pages and an audited CSV export, and an admin
// creating, re-roling and disabling an operator (each audited with its reason) without ever
// leaving no enabled admin. Screenshots go to artifacts/screenshots, one pair at phone width.
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import type { OperatorRole } from '../../server/auth/roles';
import { hasChromium, SCREENSHOTS_DIR } from '../helpers/browser';
import { expectAccessible } from '../helpers/axe';
import { useTestDatabase } from '../helpers/database';
import { closeChecked, useSignedInBrowser } from '../helpers/signed-in-browser';
import { testAdmin } from '../helpers/server';

const DOMAIN = 'admin-ui.example';

describe.skipIf(!hasChromium)('the audit log and operators pages in Chromium', () => {
  const db = useTestDatabase();
  const ui = useSignedInBrowser(db, { domain: DOMAIN, env: { DEMO_TRAFFIC: '0' } });
  const base = () => ui.baseUrl;
  const pageAs = (role: OperatorRole) => ui.pageAs(role);

  /** The audit table's body rows. */
  const auditRows = (page: Page) => page.getByRole('table', { name: 'Audit entries, newest first' }).locator('tbody tr');

  /** Fills the action filter and applies it; resolves once the URL and the rows have followed. */
  async function filterByAction(page: Page, action: string): Promise<void> {
    await page.getByLabel('Action').fill(action);
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await page.waitForURL((url) => url.searchParams.get('action') === action);
    await expect.poll(async () => [...new Set(await auditRows(page).locator('td:nth-child(3)').allTextContents())], { timeout: 10_000 }).toEqual([action]);
  }

  it('shows compliance the audit log but not the operators page', async () => {
    const page = await pageAs('compliance');
    await page.goto(base());
    const links = await page.getByRole('navigation', { name: 'Dashboard' }).getByRole('link').allTextContents();
    expect(links).toContain('Audit log');
    expect(links).not.toContain('Operators');
    const refused = await page.goto(`${base()}/operators`);
    expect(refused?.status()).toBe(403);
    await expect(page.getByRole('heading', { name: 'Not allowed' }).isVisible()).resolves.toBe(true);
    await closeChecked(page);
    const admin = await pageAs('admin');
    await admin.goto(base());
    await expect(admin.getByRole('navigation', { name: 'Dashboard' }).getByRole('link').allTextContents()).resolves.toEqual(expect.arrayContaining(['Audit log', 'Operators']));
    await closeChecked(admin);
  });

  it('filters the audit log by action in the URL and exports the same filter as an audited CSV', async () => {
    const lookup = await fetch(`${base()}/api/admin/keys/lookup`, {
      method: 'POST',
      headers: { cookie: ui.cookie('operator'), origin: base(), 'content-type': 'application/json' },
      body: JSON.stringify({ principalId: randomUUID(), key: 'audit-ui-order-7', reason: 'ticket 88: did order 7 go through?' }),
    });
    expect(lookup.status).toBe(200);
    const page = await pageAs('compliance');
    await page.goto(`${base()}/audit`);
    await expect(auditRows(page).locator('td:nth-child(3)').allTextContents()).resolves.toEqual(expect.arrayContaining(['auth.sign_in', 'operator.create', 'key.lookup']));
    await expectAccessible(page, 'audit-all.png');
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'audit-all.png'), fullPage: true });
    await filterByAction(page, 'key.lookup');
    await expect(auditRows(page).count()).resolves.toBe(1);
    const row = auditRows(page).first();
    await expect(row.textContent()).resolves.toMatch(/operator@admin-ui\.example.*key\.lookup.*key=audit-ui-order-7.*ticket 88: did order 7 go through\?.*records=0/);
    await expectAccessible(page, 'audit.png');
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'audit.png'), fullPage: true });

    // A link reproduces the view.
    await page.reload();
    await expect(page.getByLabel('Action').inputValue()).resolves.toBe('key.lookup');
    await expect(auditRows(page).count()).resolves.toBe(1);

    // The export answers as a download; pass it through a route to see its headers.
    const exported: Record<string, string>[] = [];
    const isExport = (url: URL) => url.pathname === '/api/admin/audit' && url.searchParams.get('format') === 'csv';
    await page.route(isExport, async (route) => {
      const response = await route.fetch();
      exported.push(response.headers());
      await route.fulfill({ response });
    });
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Export CSV' }).click()]);
    expect(exported).toHaveLength(1);
    expect(exported[0]?.['content-type']).toMatch(/^text\/csv/);
    await page.unroute(isExport);
    expect(download.suggestedFilename()).toMatch(/^retrysafe-audit-.*\.csv$/);
    const csv = await readFile(await download.path(), 'utf8');
    const [header, ...lines] = csv.trimEnd().split('\r\n');
    expect(header).toBe('id,at,actor,action,target,reason,details,occurrences,last_at');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('key.lookup');

    await filterByAction(page, 'audit.export');
    await expect(auditRows(page).first().textContent()).resolves.toMatch(/compliance@admin-ui\.example.*audit\.export.*filters\.action=key\.lookup.*rows=1/);

    // With the session gone, an export says so on the page and saves nothing.
    await page.context().clearCookies();
    let saved = false;
    page.once('download', () => {
      saved = true;
    });
    await page.getByRole('button', { name: 'Export CSV' }).click();
    await expect(page.getByRole('alert').filter({ hasText: 'Your session has ended, so nothing was exported.' }).textContent()).resolves.toContain('Sign in again');
    expect(saved).toBe(false);
    await closeChecked(page);
  });

  it('filters by time in the URL and appends older pages by keyset', async () => {
    // 60 entries a minute apart, from 2020-01-01T00:00Z; the page shows 50 at a time.
    await db.pool.query(
      `INSERT INTO audit_log (at, actor, action, target) SELECT timestamptz '2020-01-01T00:00:00Z' + make_interval(mins => n), 'filler@${DOMAIN}', 'test.filler', jsonb_build_object('n', n)
       FROM generate_series(0, 59) AS n`,
    );
    const page = await pageAs('compliance');
    await page.goto(`${base()}/audit?action=test.filler`);
    await expect(auditRows(page).count()).resolves.toBe(50);
    await expect(auditRows(page).first().textContent()).resolves.toContain('n=59');
    await page.getByRole('button', { name: 'Older entries' }).click();
    await expect.poll(() => auditRows(page).count(), { timeout: 10_000 }).toBe(60);
    await expect(auditRows(page).last().textContent()).resolves.toContain('n=0');
    await expect(page.getByRole('button', { name: 'Older entries' }).count()).resolves.toBe(0);

    // The inputs take the browser's local time (its zone is not the test process's).
    const inBrowserZone = (iso: string) =>
      page.evaluate((value) => {
        const date = new Date(value);
        const pad = (n: number) => String(n).padStart(2, '0');
        return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}`;
      }, iso);
    await page.getByLabel('From', { exact: true }).fill(await inBrowserZone('2020-01-01T00:10:00Z'));
    await page.getByLabel('To', { exact: true }).fill(await inBrowserZone('2020-01-01T00:20:00Z'));
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await page.waitForURL((url) => url.searchParams.has('from'));
    const url = new URL(page.url());
    expect(url.searchParams.get('from')).toMatch(/^\d{4}-\d\d-\d\dT\d\d:10:00([+-]\d\d:\d\d|Z)$/);
    expect(new Date(url.searchParams.get('from') ?? '').toISOString()).toBe('2020-01-01T00:10:00.000Z');
    expect(new Date(url.searchParams.get('to') ?? '').toISOString()).toBe('2020-01-01T00:20:00.000Z');
    await expect.poll(() => auditRows(page).count(), { timeout: 10_000 }).toBe(10);
    await expect(auditRows(page).first().textContent()).resolves.toContain('n=19');

    await page.goto(`${base()}/audit?action=no.such.action`);
    await expect(page.getByText('No audit entry matches these filters.').isVisible()).resolves.toBe(true);
    await expectAccessible(page, 'audit-empty.png');
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'audit-empty.png') });
    await closeChecked(page);
  });

  it('lets an admin create an operator, change their role and disable them, each audited with its reason', async () => {
    const email = 'new.person@admin-ui.example';
    const page = await pageAs('admin');
    await page.goto(`${base()}/operators`);
    await expect(page.getByRole('row').filter({ hasText: `admin@${DOMAIN}` }).textContent()).resolves.toContain('(you)');
    await expect(page.getByRole('row').filter({ hasText: `operator@${DOMAIN}` }).textContent()).resolves.not.toContain('(you)');

    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password', { exact: true }).fill('a long first password');
    await page.getByLabel('Role', { exact: true }).selectOption('operator');
    await page.getByLabel('Name').fill('New Person');
    await page.getByRole('button', { name: 'Create operator' }).click();
    await page.getByRole('status').filter({ hasText: `Created ${email} as operator` }).waitFor();
    const row = page.getByRole('row').filter({ hasText: email });
    await row.waitFor();

    await page.getByLabel(`Role of ${email}`, { exact: true }).selectOption('compliance');
    await page.getByRole('button', { name: `Save role of ${email}` }).click();
    const roleDialog = page.getByRole('dialog', { name: 'Change this role?' });
    await expect(roleDialog.textContent()).resolves.toContain(`${email} goes from operator to compliance`);
    await roleDialog.getByLabel('Reason').fill('ticket 12: joins the compliance team');
    await roleDialog.getByRole('button', { name: 'Change role' }).click();
    await page.getByRole('status').filter({ hasText: `${email} is now compliance` }).waitFor();

    await page.getByRole('button', { name: `Disable ${email}` }).click();
    const disableDialog = page.getByRole('dialog', { name: 'Disable this operator?' });
    await disableDialog.getByLabel('Reason').fill('ticket 13: left the company');
    await expectAccessible(page, 'operators-disable.png');
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'operators-disable.png') });
    await disableDialog.getByRole('button', { name: 'Disable operator' }).click();
    await page.getByRole('status').filter({ hasText: `Disabled ${email}` }).waitFor();
    await expect.poll(() => row.locator('td:nth-child(4)').textContent(), { timeout: 10_000 }).toBe('Disabled');
    await expect(page.getByLabel(`Role of ${email}`, { exact: true }).inputValue()).resolves.toBe('compliance');
    await expect(page.getByRole('button', { name: `Enable ${email}` }).isVisible()).resolves.toBe(true);
    await expectAccessible(page, 'operators.png');
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'operators.png'), fullPage: true });
    await closeChecked(page);

    const { rows } = await db.pool.query<{ actor: string; action: string; reason: string | null }>(
      "SELECT actor, action, reason FROM audit_log WHERE target->>'email' = $1 ORDER BY id",
      [email],
    );
    expect(rows).toEqual([
      { actor: `admin@${DOMAIN}`, action: 'operator.create', reason: null },
      { actor: `admin@${DOMAIN}`, action: 'operator.role', reason: 'ticket 12: joins the compliance team' },
      { actor: `admin@${DOMAIN}`, action: 'operator.disable', reason: 'ticket 13: left the company' },
    ]);
    // And the audit page shows them (an admin has every compliance page).
    const audit = await pageAs('admin');
    await audit.goto(`${base()}/audit?actor=${encodeURIComponent(`admin@${DOMAIN}`)}`);
    const texts = await auditRows(audit).allTextContents();
    expect(texts.find((text) => text.includes('operator.role'))).toMatch(/ticket 12: joins the compliance team.*role=operator→compliance/);
    expect(texts.find((text) => text.includes('operator.disable'))).toMatch(/ticket 13: left the company.*disabled=false→true/);
    await closeChecked(audit);
  });

  it('refuses to disable the last enabled admin, and says so', async () => {
    const page = await pageAs('admin');
    await page.goto(`${base()}/operators`);
    // The bootstrapped admin goes first, which leaves this admin alone.
    await page.getByRole('button', { name: `Disable ${testAdmin.email}` }).click();
    const first = page.getByRole('dialog', { name: 'Disable this operator?' });
    await first.getByLabel('Reason').fill('ticket 14: shared bootstrap account retired');
    await first.getByRole('button', { name: 'Disable operator' }).click();
    await page.getByRole('status').filter({ hasText: `Disabled ${testAdmin.email}` }).waitFor();

    const me = `admin@${DOMAIN}`;
    await page.getByRole('button', { name: `Disable ${me}` }).click();
    const dialog = page.getByRole('dialog', { name: 'Disable this operator?' });
    await expect(dialog.textContent()).resolves.toContain('This is you');
    await dialog.getByLabel('Reason').fill('testing the last-admin rule');
    await dialog.getByRole('button', { name: 'Disable operator' }).click();
    await dialog.getByRole('alert').filter({ hasText: 'This is the last enabled admin: make another admin first' }).waitFor();
    await expectAccessible(page, 'operators-last-admin.png');
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'operators-last-admin.png') });
    const { rows } = await db.pool.query<{ banned: boolean }>('SELECT banned FROM operators WHERE email = $1', [me]);
    expect(rows).toEqual([{ banned: false }]);
    await closeChecked(page);
  });

  it('stays usable at phone width', async () => {
    const page = await pageAs('admin');
    await page.setViewportSize({ width: 390, height: 844 });
    for (const path of ['/audit', '/operators']) {
      await page.goto(`${base()}${path}`);
      const table = page.getByRole('table');
      await table.waitFor();
      // Wide tables scroll inside their card; the page itself does not scroll sideways.
      await expect(page.evaluate(() => document.documentElement.scrollWidth)).resolves.toBeLessThanOrEqual(390);
      const name = path.slice(1);
      await expectAccessible(page, `${name}-phone.png`);
      await page.screenshot({ path: join(SCREENSHOTS_DIR, `${name}-phone.png`) });
      await table.scrollIntoViewIfNeeded();
      await expectAccessible(page, `${name}-phone-table.png`);
      await page.screenshot({ path: join(SCREENSHOTS_DIR, `${name}-phone-table.png`) });
    }
    await closeChecked(page);
  });
});
