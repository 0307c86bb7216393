// Phone and keyboard (#31 point 7) in Chromium at 390 x 844: no table on the overview, claims,
// retention and keys pages is wider than the screen (rows become cards), the first Tab stop is
// the skip link to the main content, no chart SVG is a Tab stop, and after "List keys", a
// look-up or a correlation search focus is on the results, not on <body>. axe-core runs on
// every state visited.
// Screenshots go to artifacts/screenshots/phone-*.
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { beforeAll, describe, expect, it } from 'vitest';
import { createTenant, type CreatedTenant } from '../../server/demo/tenants';
import { rebuildSeries } from '../../server/metrics/series';
import { expectAccessible } from '../helpers/axe';
import { hasChromium, SCREENSHOTS_DIR } from '../helpers/browser';
import { useTestDatabase } from '../helpers/database';
import { createPayment, refundsWithDuplicates } from '../helpers/incident';
import { closeChecked, useSignedInBrowser } from '../helpers/signed-in-browser';
import { sleep } from '../../packages/store/test/helpers/store';

const WIDTH = 390;
const REFUNDS = 'POST /api/v1/refunds';

/** The page's width and every table wider than its container (each as "caption: table px in container px"). */
async function widths(page: Page): Promise<{ page: number; tables: string[] }> {
  return page.evaluate(() => ({
    page: document.documentElement.scrollWidth,
    tables: [...document.querySelectorAll('main table')]
      .filter((table) => table.getBoundingClientRect().width > 0)
      .flatMap((table) => {
        const container = table.parentElement as HTMLElement;
        const name = table.querySelector('caption')?.textContent ?? table.className;
        return table.scrollWidth > container.clientWidth || table.getBoundingClientRect().right > document.documentElement.clientWidth
          ? [`${name}: ${table.scrollWidth} px in ${container.clientWidth} px`]
          : [];
      }),
  }));
}

async function expectFitsPhone(page: Page, what: string): Promise<void> {
  const measured = await widths(page);
  expect.soft(measured.tables, `tables wider than their container on ${what}`).toEqual([]);
  expect.soft(measured.page, `page width of ${what}`).toBeLessThanOrEqual(WIDTH);
}

/** What the focused element is: tag, id, and its accessible-ish label. */
function focused(page: Page): Promise<string> {
  return page.evaluate(() => {
    const element = document.activeElement;
    if (!element) return 'nothing';
    return `${element.tagName.toLowerCase()}#${element.id} ${element.getAttribute('aria-label') ?? element.textContent.trim().slice(0, 40)}`;
  });
}

describe.skipIf(!hasChromium)('phone and keyboard in Chromium', () => {
  const db = useTestDatabase();
  const ui = useSignedInBrowser(db, {
    domain: 'phone-keyboard.example',
    env: { DEMO_TRAFFIC: '0', METRICS_FLUSH_SECONDS: '1', DEMO_PROCESSOR_LATENCY_MS: '400', DEMO_PROCESSOR_FAILURE_RATE: '0' },
  });
  let tenant: CreatedTenant;
  let conflicts = 0;

  beforeAll(async () => {
    // A tenant behind conflicts (the principals table), with live keys to list.
    tenant = await createTenant(db.pool, 'Refundly Phone Ltd');
    const payment = await createPayment(ui.baseUrl, tenant, 'phone-payment');
    const refunds = await refundsWithDuplicates([ui.baseUrl], tenant, payment, 9, 'phone-refund');
    conflicts = refunds.statuses.get(409) ?? 0;
    // A refund claim whose handler died (the stale-claims table), and minutes of flow (the charts).
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
       VALUES ($1, 'demo', $2, 'refund-crashed-phone', 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), now() - interval '3 minutes', now() + interval '1 day')`,
      [tenant.principalId, REFUNDS],
    );
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
       SELECT date_trunc('minute', now()) - (m + 1) * interval '1 minute', 'demo', $1, o, c
       FROM generate_series(0, 7) AS m, (VALUES ('new', 60), ('conflict', 4)) AS t(o, c)
       ON CONFLICT (minute, service, scope, outcome) DO NOTHING`,
      [REFUNDS],
    );
    await rebuildSeries(db.pool);
  }, 120_000);

  async function phonePage(role: Parameters<typeof ui.pageAs>[0]): Promise<Page> {
    const page = await ui.pageAs(role);
    await page.setViewportSize({ width: WIDTH, height: 844 });
    return page;
  }

  // expect.soft throughout: one run reports every place the phone or the keyboard is let down.
  it('shows the overview, claims and retention tables as cards within 390 px; the first Tab is the skip link; charts are no Tab stops', { timeout: 120_000 }, async () => {
    expect(conflicts).toBeGreaterThan(0);
    const base = ui.baseUrl;
    const page = await phonePage('admin');
    // The principals table, once the recorder's flush (every second) has its row.
    const principals = page.getByRole('region', { name: 'Principals behind conflicts, mismatches, rejections and stale claims' });
    const keysLink = principals.getByRole('link', { name: 'Keys of Refundly Phone Ltd' });
    for (let attempt = 0; attempt < 20; attempt += 1) {
      await page.goto(`${base}/?range=1h`);
      await principals.waitFor();
      if ((await keysLink.count()) > 0) break;
      await sleep(1_000);
    }
    await page.getByRole('figure', { name: 'Share of claims' }).locator('svg').first().waitFor();
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'phone-overview.png'), fullPage: true });

    // The first Tab stop: "Skip to content", visible once focused; following it lands in <main>.
    await page.keyboard.press('Tab');
    const skip = page.getByRole('link', { name: 'Skip to content' });
    expect.soft(await focused(page), 'the first Tab stop').toMatch(/^a#.* Skip to content/);
    if ((await skip.count()) === 1) {
      const box = await skip.boundingBox();
      expect.soft((box?.width ?? 0) > 1 && (box?.height ?? 0) > 1 && (box?.y ?? -1) >= 0, 'the focused skip link is on screen').toBe(true);
      await page.screenshot({ path: join(SCREENSHOTS_DIR, 'phone-skip-link.png') });
      await page.keyboard.press('Enter');
      expect.soft(await page.evaluate(() => document.activeElement?.tagName.toLowerCase()), 'focus after the skip link').toBe('main');
    }

    // No SVG of a chart is in the Tab order (none acts on its own).
    const chartStops = await page.evaluate(() =>
      [...document.querySelectorAll('figure.chart svg, figure.chart [tabindex]')]
        .filter((element) => (element as HTMLElement | SVGElement).tabIndex >= 0)
        .map((element) => `${element.tagName.toLowerCase()} in ${element.closest('figure')?.getAttribute('aria-label') ?? '?'}`),
    );
    expect.soft(chartStops, 'chart elements in the Tab order').toEqual([]);
    await expectFitsPhone(page, 'the overview');
    // The row's link to the principal's keys is on screen, not off to the right.
    await keysLink.scrollIntoViewIfNeeded();
    const keys = await keysLink.boundingBox();
    expect.soft((keys?.x ?? -1) >= 0 && (keys?.x ?? 0) + (keys?.width ?? 0) <= WIDTH, `"Keys" within the screen (${JSON.stringify(keys)})`).toBe(true);
    await expectAccessible(page, 'the overview at 390 px');

    await page.goto(`${base}/claims`);
    await page.getByRole('button', { name: 'Release refund-crashed-phone' }).waitFor();
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'phone-claims.png'), fullPage: true });
    await expectFitsPhone(page, '/claims');
    await expectAccessible(page, '/claims at 390 px');

    await page.goto(`${base}/retention`);
    await page.getByRole('table').first().waitFor();
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'phone-retention.png'), fullPage: true });
    await expectFitsPhone(page, '/retention');
    await expectAccessible(page, '/retention at 390 px');
    await closeChecked(page);
  });

  it('lists keys as cards within 390 px, and moves focus to the results after "List keys", a look-up and a correlation search', { timeout: 90_000 }, async () => {
    const base = ui.baseUrl;
    const page = await phonePage('operator');
    const focusWithin = (name: string) => page.getByRole('region', { name, exact: true }).evaluate((region) => region.contains(document.activeElement), undefined, { timeout: 2_000 });
    await page.goto(`${base}/keys?principalId=${tenant.principalId}`);
    await page.getByLabel('Reason').fill('phone: a customer asks about refunds');
    await page.getByRole('button', { name: 'List keys' }).click();
    await page.getByRole('table', { name: 'Live keys of the principal, newest first' }).waitFor();
    await page.getByRole('table', { name: 'Live keys of the principal, newest first' }).scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'phone-keys-list.png'), fullPage: true });
    await sleep(200); // the focus moves in the render that shows the list
    expect.soft(await focusWithin('Listed keys').catch(() => false), `focus after List keys (on ${await focused(page)})`).toBe(true);
    await expectFitsPhone(page, '/keys, the list');
    await expectAccessible(page, '/keys, the list at 390 px');

    await page.getByRole('button', { name: 'Look up phone-refund-0', exact: true }).click();
    await page.getByRole('article', { name: `Record in ${REFUNDS} of demo` }).waitFor();
    await sleep(200);
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'phone-keys-record.png'), fullPage: true });
    expect.soft(await focusWithin('Lookup result').catch(() => false), `focus after a look-up (on ${await focused(page)})`).toBe(true);
    await expectFitsPhone(page, '/keys, a record');
    await expectAccessible(page, '/keys, a record at 390 px');

    // And after a search by correlation id.
    const { rows } = await db.pool.query<{ correlation_id: string }>("SELECT correlation_id FROM idempotency_keys WHERE key = 'phone-refund-0'");
    await page.getByRole('textbox', { name: 'Correlation id' }).fill(rows[0]?.correlation_id ?? '');
    await page.getByRole('button', { name: 'Find request' }).click();
    await page.getByRole('article', { name: `Request ${rows[0]?.correlation_id ?? ''}` }).waitFor();
    await sleep(200);
    expect.soft(await focusWithin('Requests found').catch(() => false), `focus after Find request (on ${await focused(page)})`).toBe(true);
    await expectAccessible(page, '/keys, a request found at 390 px');
    await closeChecked(page);
  });
});
