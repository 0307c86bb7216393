// The built app, started as `npm start` starts it, seen through a real browser.
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ARTIFACTS_DIR, hasChromium, launchBrowser } from '../helpers/browser';
import { useTestDatabase } from '../helpers/database';
import { startServer, type RunningServer } from '../helpers/server';

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

  it('serves the home page with the instance status', async () => {
    if (!browser || !server) throw new Error('set-up failed');
    const page = await browser.newPage();
    const response = await page.goto(server.baseUrl);
    expect(response?.status()).toBe(200);
    await expect(page.getByRole('heading', { name: 'Retrysafe', level: 1 }).isVisible()).resolves.toBe(true);
    const status = page.getByRole('region', { name: 'Instance status' });
    await expect(status.getByText('ok', { exact: true }).isVisible()).resolves.toBe(true);
    await mkdir(join(ARTIFACTS_DIR, 'screenshots'), { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS_DIR, 'screenshots', 'home.png'), fullPage: true });
  });

  it('answers /api/health with 200, the database and the schema version', async () => {
    if (!server) throw new Error('set-up failed');
    const response = await fetch(`${server.baseUrl}/api/health`);
    expect(response.status).toBe(200);
    expect(response.headers.get('cache-control')).toBe('no-store');
    const body = (await response.json()) as { status: string; database: { reachable: boolean }; migrations: { pending: string[] } };
    expect(body.status).toBe('ok');
    expect(body.database.reachable).toBe(true);
    expect(body.migrations.pending).toEqual([]);
  });
});
