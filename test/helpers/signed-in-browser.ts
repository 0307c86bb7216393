// The set-up the dashboard's browser tests share: the built server on the test database,
// Chromium, and a signed-in session for every role; pages opened as a role, and closed with
// the checks every page must pass (no CSP refusal, no hydration error).
import { mkdir } from 'node:fs/promises';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, expect } from 'vitest';
import type { OperatorRole } from '../../server/auth/roles';
import { expectAccessible } from './axe';
import { cspViolations, hydrationErrors, launchBrowser, openPageAs, SCREENSHOTS_DIR } from './browser';
import type { TestDatabase } from './database';
import { signInEveryRole } from './operators';
import { startServer, type RunningServer } from './server';

export interface SignedInBrowser {
  /** The server's base URL (empty until set-up has run). */
  readonly baseUrl: string;
  /** The cookie header of `role`'s session. */
  cookie(role: OperatorRole): string;
  /** A fresh page signed in as `role`. */
  pageAs(role: OperatorRole): Promise<Page>;
}

/** Registers the hooks (call inside describe, after useTestDatabase) and returns the handle. */
export function useSignedInBrowser(db: TestDatabase, options: { domain: string; env: Record<string, string> }): SignedInBrowser {
  let server: RunningServer | undefined;
  let browser: BrowserContext | undefined;
  let cookies = new Map<OperatorRole, string>();
  beforeAll(async () => {
    server = await startServer(db.url, options.env);
    browser = await launchBrowser();
    cookies = await signInEveryRole(db, server.baseUrl, options.domain);
    await mkdir(SCREENSHOTS_DIR, { recursive: true });
  }, 300_000); // the first server of a run may build the app while other test files wait for it
  afterAll(async () => {
    await browser?.close();
    await server?.stop();
  });
  return {
    get baseUrl() {
      return server?.baseUrl ?? '';
    },
    cookie: (role) => cookies.get(role) ?? '',
    pageAs(role) {
      if (!browser || !server) throw new Error('set-up failed');
      return openPageAs(browser, server.baseUrl, cookies.get(role) ?? '');
    },
  };
}

/** Every page ran under its Content-Security-Policy without a refusal, hydrated cleanly, and its last state has no axe-core violation. */
export async function closeChecked(page: Page): Promise<void> {
  await expectAccessible(page, `the last state of ${page.url()}`);
  await expect(cspViolations(page)).resolves.toEqual([]);
  expect(hydrationErrors(page)).toEqual([]);
  await page.close();
}

/**
 * Waits until the demo traffic's flushes have reached the database with new keys and replays
 * both. A page opened with `refresh=off` asks once: opened before that (a busy machine starts the
 * traffic late), the charts without data say "no data" and are never drawn (the replays chart
 * needs a replay, the share and latency charts a claim).
 */
export async function waitForDemoFlow(db: TestDatabase): Promise<void> {
  await expect
    .poll(
      async () =>
        (
          await db.pool.query<{ outcome: string }>(
            `SELECT outcome FROM flow_counts_minute WHERE service = 'demo' AND outcome IN ('new', 'replay') GROUP BY outcome HAVING sum(count) > 0 ORDER BY outcome`,
          )
        ).rows.map((row) => row.outcome),
      { timeout: 120_000, interval: 500 },
    )
    .toEqual(['new', 'replay']);
}
