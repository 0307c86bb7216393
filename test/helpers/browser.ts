// Browser tests drive Debian's Chromium through playwright-core. Where no Chromium is
// found they are skipped, and say so.
import { existsSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';

export const chromiumPath = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
export const hasChromium = existsSync(chromiumPath);

if (!hasChromium) {
  process.stdout.write(`Browser tests SKIPPED: no Chromium at ${chromiumPath} (install it, or set CHROMIUM_PATH)\n`);
}

/** Flags that keep Chromium quiet on a machine with no network beyond loopback. */
const FLAGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export async function launchBrowser(): Promise<BrowserContext> {
  const profile = await mkdtemp(join(tmpdir(), 'retrysafe-chromium-'));
  return chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    args: FLAGS,
    viewport: { width: 1280, height: 800 },
    // Not the server's zone (UTC): a page that renders times differently on the server and in
    // the browser fails to hydrate, and hydrationErrors() reports it.
    timezoneId: 'America/New_York',
  });
}

export const ARTIFACTS_DIR = join(process.cwd(), 'artifacts');
export const SCREENSHOTS_DIR = join(ARTIFACTS_DIR, 'screenshots');

/**
 * A fresh page signed in with `cookieHeader` (the cookies a sign-in set), recording every
 * Content-Security-Policy violation the browser reports to it (see closeChecked in signed-in-browser.ts).
 */
export async function openPageAs(browser: BrowserContext, baseUrl: string, cookieHeader: string): Promise<Page> {
  await browser.clearCookies();
  await browser.addCookies(
    cookieHeader.split('; ').map((pair) => ({ name: pair.slice(0, pair.indexOf('=')), value: pair.slice(pair.indexOf('=') + 1), url: baseUrl, httpOnly: true, sameSite: 'Strict' as const })),
  );
  const page = await browser.newPage();
  await recordCspViolations(page);
  return page;
}

const consoleErrors = new WeakMap<Page, string[]>();

/** React's hydration errors the page logged (a server render that differs from the browser's). */
export function hydrationErrors(page: Page): string[] {
  return (consoleErrors.get(page) ?? []).filter((text) => /hydrat|#418|#423|#425/i.test(text));
}

export async function recordCspViolations(page: Page): Promise<void> {
  const errors: string[] = [];
  consoleErrors.set(page, errors);
  page.on('console', (message) => {
    if (message.type() === 'error') errors.push(message.text());
  });
  page.on('pageerror', (error) => errors.push(error.message));
  await page.addInitScript(() => {
    const seen: string[] = [];
    Object.assign(window, { cspViolations: seen });
    document.addEventListener('securitypolicyviolation', (event) => seen.push(`${event.violatedDirective} ${event.blockedURI}`));
  });
}

export function cspViolations(page: Page): Promise<string[]> {
  return page.evaluate(() => (window as unknown as { cspViolations: string[] }).cspViolations);
}
