// The built app, started as `npm start` starts it, seen through a real browser.
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cspViolations, hasChromium, launchBrowser, recordCspViolations, SCREENSHOTS_DIR } from '../helpers/browser';
import { expectAccessible } from '../helpers/axe';
import { useTestDatabase } from '../helpers/database';
import { startServer, testAdmin, type RunningServer } from '../helpers/server';

describe.skipIf(!hasChromium)('home page in Chromium', () => {
  const db = useTestDatabase();
  let server: RunningServer | undefined;
  let browser: BrowserContext | undefined;

  beforeAll(async () => {
    server = await startServer(db.url);
    browser = await launchBrowser();
  });
  afterAll(async () => {
    await browser?.close();
    await server?.stop();
  });

  it('sends a newcomer to /login, signs in with the bootstrapped admin, and shows the overview', async () => {
    if (!browser || !server) throw new Error('set-up failed');
    const page = await browser.newPage();
    await recordCspViolations(page);
    const login = await page.goto(server.baseUrl);
    expect(new URL(page.url()).pathname).toBe('/login');
    const csp = login?.headers()['content-security-policy'] ?? '';
    expect(csp).toMatch(/script-src 'self' 'nonce-[^']+' 'strict-dynamic'/);
    expect(csp).toContain("frame-ancestors 'none'");
    expect(login?.headers()['referrer-policy']).toBe('same-origin');
    await mkdir(SCREENSHOTS_DIR, { recursive: true });
    await page.getByLabel('Email').fill(testAdmin.email);
    await page.getByLabel('Password').fill('not the password');
    await page.getByRole('button', { name: 'Sign in' }).click();
    // (Next's route announcer is an alert region too: pick ours by its text.)
    await page.getByRole('alert').filter({ hasText: 'Wrong email or password' }).waitFor();
    await expectAccessible(page, 'login-failed.png');
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'login-failed.png'), fullPage: true });
    await page.getByLabel('Password').fill(testAdmin.password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL((url) => url.pathname === '/');
    const cookies = await browser.cookies(server.baseUrl);
    const session = cookies.find((cookie) => cookie.name === 'retrysafe.session_token');
    expect(session).toMatchObject({ httpOnly: true, sameSite: 'Strict' });
    await expect(page.getByRole('heading', { name: 'Overview', level: 1 }).isVisible()).resolves.toBe(true);
    // The page ran under the policy: Next's scripts carry the nonce, nothing was refused.
    await expect(cspViolations(page)).resolves.toEqual([]);
    await expectAccessible(page, 'home.png');
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'home.png'), fullPage: true });
    // Sign-out ends the session server-side: the old cookie no longer opens anything.
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL((url) => url.pathname === '/login');
    const replayed = await fetch(`${server.baseUrl}/api/admin/overview`, { headers: { cookie: `${session?.name ?? ''}=${session?.value ?? ''}` } });
    expect(replayed.status).toBe(401);
  });

  it('answers /api/health with 200; with METRICS_TOKEN unset its details follow /api/metrics, open to anyone', async () => {
    if (!server) throw new Error('set-up failed');
    const response = await fetch(`${server.baseUrl}/api/health`);
    expect(response.status).toBe(200);
    expect(response.headers.get('cache-control')).toBe('no-store');
    // One rule for both (metricsAuthorized): a set token closes both; the access test covers that.
    expect(await response.json()).toMatchObject({ status: 'ok', database: { serverVersion: expect.stringMatching(/^\d+/) as unknown } });
  });
});
