// Issue #13, point 3, in Chromium against the started server: signing in through the form
// leaves a device cookie (HttpOnly, SameSite=Strict); a stranger's five wrong passwords then
// lock the account for unknown devices, yet the operator signs in again from this browser.
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hasChromium, launchBrowser } from '../helpers/browser';
import { expectAccessible } from '../helpers/axe';
import { useTestDatabase } from '../helpers/database';
import { startServer, testAdmin, type RunningServer } from '../helpers/server';

describe.skipIf(!hasChromium)('device cookie in Chromium', () => {
  const db = useTestDatabase();
  let server: RunningServer | undefined;
  let browser: BrowserContext | undefined;

  beforeAll(async () => {
    server = await startServer(db.url, { DEMO_TRAFFIC: '0' });
    browser = await launchBrowser();
  });
  afterAll(async () => {
    await browser?.close();
    await server?.stop();
  });

  async function signIn(page: Page, password: string): Promise<void> {
    await page.goto(`${server?.baseUrl ?? ''}/login`);
    await page.getByLabel('Email').fill(testAdmin.email);
    await page.getByLabel('Password').fill(password);
    await page.getByRole('button', { name: 'Sign in' }).click();
  }

  it('keeps an operator\'s own browser signing in while strangers have locked the account', async () => {
    if (!browser || !server) throw new Error('set-up failed');
    const page = await browser.newPage();
    await signIn(page, testAdmin.password);
    await page.waitForURL((url) => url.pathname === '/');
    const device = (await browser.cookies(server.baseUrl)).find((cookie) => cookie.name === 'retrysafe.device');
    expect(device).toMatchObject({ httpOnly: true, sameSite: 'Strict' });
    await expectAccessible(page, 'the overview after signing in');
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL((url) => url.pathname === '/login');
    await expectAccessible(page, 'the sign-in page after signing out');

    // A stranger (no device cookie) guesses five times, then even the right password is refused.
    // (A refusal by the hashing bound is waited out, as its Retry-After asks: it counts nothing.)
    const stranger = async (password: string): Promise<Response> => {
      for (;;) {
        const answer = await fetch(`${server?.baseUrl ?? ''}/api/auth/sign-in`, { method: 'POST', headers: { origin: server?.baseUrl ?? '', 'content-type': 'application/json' }, body: JSON.stringify({ email: testAdmin.email, password }) });
        if (answer.status !== 429 || !(await answer.clone().text()).includes('sign-in-busy')) return answer;
        await new Promise((done) => setTimeout(done, Number(answer.headers.get('retry-after')) * 1000));
      }
    };
    for (let i = 0; i < 5; i += 1) expect((await stranger(`wrong guess ${i}`)).status).toBe(401);
    const locked = await stranger(testAdmin.password);
    expect(locked.status).toBe(429);
    expect(Number(locked.headers.get('retry-after'))).toBeGreaterThan(800);

    // This browser is a known device: it gets in.
    await signIn(page, testAdmin.password);
    await page.waitForURL((url) => url.pathname === '/');
    await expect(page.getByRole('heading', { name: 'Overview', level: 1 }).isVisible()).resolves.toBe(true);
    await expectAccessible(page, 'the overview, signed in again');
    await page.close();
  });
});
