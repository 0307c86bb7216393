// Passwords in Chromium against the built server: an operator changes their own password on
// /account (the current one required, their other sessions signed out, audited), and an admin
// resets another operator's password on /operators (generated, shown once, that operator's
// sessions ended, audited). Each new password then signs in through /login. The change API
// answers in problem+json and locks the account after five wrong current passwords.
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createOperatorAuth, signInOperator } from '../../server/auth/operator-auth';
import { hasChromium, SCREENSHOTS_DIR } from '../helpers/browser';
import { expectAccessible } from '../helpers/axe';
import { useTestDatabase } from '../helpers/database';
import { OPERATOR_PASSWORD } from '../helpers/operators';
import { testSecrets } from '../helpers/server';
import { closeChecked, useSignedInBrowser } from '../helpers/signed-in-browser';

const DOMAIN = 'passwords.example';

describe.skipIf(!hasChromium)('password change and reset in Chromium', () => {
  const db = useTestDatabase();
  const ui = useSignedInBrowser(db, { domain: DOMAIN, env: { DEMO_TRAFFIC: '0' } });
  const base = () => ui.baseUrl;

  /** Another session of `email`, as a second browser elsewhere would hold: its cookie header. */
  async function anotherSession(email: string, password: string): Promise<string> {
    // Two: the sign-in's transaction holds one, its disabled-operator check takes another.
    const dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 2 });
    try {
      const auth = createOperatorAuth({ pool: db.authPool, secret: testSecrets.AUTH_SECRET, baseURL: base() });
      const signedIn = await signInOperator(auth, dashboard, { email, password }, { headers: new Headers(), address: null });
      if (!signedIn.ok) throw new Error(`could not sign in as ${email}`);
      return signedIn.setCookie.map((line) => line.split(';')[0]).join('; ');
    } finally {
      await dashboard.end();
    }
  }

  /** The status an admin API answers a session cookie with: 200 while it lives, 401 once it has ended. */
  const overviewStatus = async (cookie: string) => (await fetch(`${base()}/api/admin/overview`, { headers: { cookie } })).status;

  async function signInThroughLogin(page: Page, email: string, password: string): Promise<void> {
    await page.context().clearCookies();
    await page.goto(`${base()}/login`);
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(`${base()}/`);
  }

  it('lets an operator change their own password: current one required, other sessions signed out, audited', async () => {
    const email = `viewer@${DOMAIN}`;
    const elsewhere = await anotherSession(email, OPERATOR_PASSWORD);
    await expect(overviewStatus(elsewhere)).resolves.toBe(200);
    const page = await ui.pageAs('viewer');
    await page.goto(base());
    await page.getByRole('link', { name: 'Account' }).click();
    await page.waitForURL(`${base()}/account`);
    await expect(page.getByRole('heading', { name: 'Your account' }).isVisible()).resolves.toBe(true);

    const next = 'my own new passphrase';
    await page.getByLabel('Current password').fill('not the password at all');
    await page.getByLabel('New password', { exact: true }).fill(next);
    await page.getByLabel('Confirm new password').fill(next);
    await page.getByRole('button', { name: 'Change password' }).click();
    await page.getByRole('alert').filter({ hasText: 'Current password: The current password is not right' }).waitFor();

    await page.getByLabel('Current password').fill(OPERATOR_PASSWORD);
    await page.getByRole('button', { name: 'Change password' }).click();
    await page.getByRole('status').filter({ hasText: 'Password changed; 1 other session was signed out' }).waitFor();
    await expectAccessible(page, 'account-password.png');
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'account-password.png') });
    // The other session has ended; this one goes on.
    await expect(overviewStatus(elsewhere)).resolves.toBe(401);
    await expect(overviewStatus(ui.cookie('viewer'))).resolves.toBe(200);
    const { rows } = await db.pool.query<{ actor: string; details: unknown }>("SELECT actor, details FROM audit_log WHERE action = 'operator.password_change'");
    expect(rows).toEqual([{ actor: email, details: { otherSessionsEnded: 1 } }]);

    await signInThroughLogin(page, email, next);
    await closeChecked(page);
  });

  it('lets an admin reset another operator\'s password: generated, shown once, their sessions ended, audited', async () => {
    const email = `operator@${DOMAIN}`;
    await expect(overviewStatus(ui.cookie('operator'))).resolves.toBe(200);
    const page = await ui.pageAs('admin');
    await page.goto(`${base()}/operators`);
    // Your own password is changed on /account, with the current one.
    await page.getByRole('row').filter({ hasText: email }).waitFor();
    await expect(page.getByRole('button', { name: `Reset password of admin@${DOMAIN}` }).count()).resolves.toBe(0);

    await page.getByRole('button', { name: `Reset password of ${email}` }).click();
    const dialog = page.getByRole('dialog', { name: 'Reset this password?' });
    await expect(dialog.textContent()).resolves.toContain(`${email} gets a new generated password`);
    await dialog.getByLabel('Reason').fill('ticket 21: forgot it');
    await dialog.getByRole('button', { name: 'Reset password' }).click();
    const shown = page.getByRole('dialog', { name: `New password for ${email}` });
    const password = (await shown.locator('code').textContent()) ?? '';
    expect(password.length).toBeGreaterThanOrEqual(12);
    await expectAccessible(page, 'operators-password-reset.png');
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'operators-password-reset.png') });
    await shown.getByRole('button', { name: 'Done' }).click();
    await page.getByRole('status').filter({ hasText: `Reset the password of ${email}; their sessions have ended.` }).waitFor();
    // Shown once: gone from the page with the dialog (cleared as it closes, a render after the status).
    await expect.poll(() => page.getByText(password).count()).toBe(0);

    await expect(overviewStatus(ui.cookie('operator'))).resolves.toBe(401);
    const { rows } = await db.pool.query<{ actor: string; reason: string; text: string }>(
      "SELECT actor, reason, audit_log::text AS text FROM audit_log WHERE action = 'operator.password_reset' AND target->>'email' = $1",
      [email],
    );
    expect(rows.map(({ actor, reason }) => ({ actor, reason }))).toEqual([{ actor: `admin@${DOMAIN}`, reason: 'ticket 21: forgot it' }]);
    expect(rows[0]?.text).not.toContain(password);

    await signInThroughLogin(page, email, password);
    await closeChecked(page);
  });

  it('answers the password change API in problem+json: 415, a wrong current password by its field, 403 from another origin, 429 once locked', async () => {
    const change = (body: string, headers: Record<string, string> = {}) =>
      fetch(`${base()}/api/account/password`, { method: 'POST', headers: { cookie: ui.cookie('compliance'), origin: base(), 'content-type': 'application/json', ...headers }, body });
    const wrong = JSON.stringify({ currentPassword: 'not it at all', newPassword: 'another new passphrase', confirmation: 'another new passphrase' });
    const asText = await change(wrong, { 'content-type': 'text/plain' });
    expect([asText.status, asText.headers.get('content-type')]).toEqual([415, 'application/problem+json']);
    const foreign = await change(wrong, { origin: 'https://evil.example' });
    expect(foreign.status).toBe(403);
    const mismatch = await change(JSON.stringify({ currentPassword: OPERATOR_PASSWORD, newPassword: 'another new passphrase', confirmation: 'something else' }));
    expect(mismatch.status).toBe(400);
    await expect(mismatch.json()).resolves.toMatchObject({ errors: [{ path: 'confirmation' }] });
    // Each wrong password counts like a failed sign-in: the fifth locks the account.
    for (let attempt = 1; attempt <= 5; attempt += 1) {
      const response = await change(wrong);
      expect([attempt, response.status, response.headers.get('content-type'), response.headers.get('cache-control')]).toEqual([attempt, 400, 'application/problem+json', 'no-store']);
      await expect(response.json()).resolves.toMatchObject({ errors: [{ path: 'currentPassword' }] });
    }
    const locked = await change(JSON.stringify({ currentPassword: OPERATOR_PASSWORD, newPassword: 'another new passphrase', confirmation: 'another new passphrase' }));
    expect(locked.status).toBe(429);
    expect(Number(locked.headers.get('retry-after'))).toBeGreaterThan(0);
    const { rows } = await db.pool.query("SELECT 1 FROM audit_log WHERE action = 'operator.password_change' AND actor = $1", [`compliance@${DOMAIN}`]);
    expect(rows).toEqual([]);
    await db.pool.query('DELETE FROM sign_in_throttle');
  });
});
