// Shareable time (issue #31, points 4 and 8) against the built server with demo traffic: an
// absolute window (from/to) in the overview's address and API, checked and shown, kept on
// reload, copied as a link, and set by dragging across a chart; the first HTML carrying the overview's data;
// a key looked up put in the /keys address without its reason.
import { describe, expect, it } from 'vitest';
import { hasChromium } from '../helpers/browser';
import { useTestDatabase } from '../helpers/database';
import { closeChecked, useSignedInBrowser, waitForDemoFlow } from '../helpers/signed-in-browser';

const minute = (ms: number) => new Date(Math.floor(ms / 60_000) * 60_000).toISOString();

describe.skipIf(!hasChromium)('shareable time on the overview', () => {
  const db = useTestDatabase();
  const ui = useSignedInBrowser(db, { domain: 'window.example', env: { DEMO_TRAFFIC: '1', METRICS_FLUSH_SECONDS: '1' } });

  it('answers a bad from/to on the API with a 400 problem+json naming the parameter, and a good one with that window', async () => {
    const get = (query: string) => fetch(`${ui.baseUrl}/api/admin/overview?${query}`, { headers: { cookie: ui.cookie('viewer') } });
    const cases: [string, string][] = [
      ['from=yesterday&to=2026-12-01T06:00:00Z', 'from'],
      ['from=2026-12-01T06:00:00Z&to=2026-12-01T05:00:00Z', 'to'],
      ['from=2026-12-01T06:00:00Z', 'to'],
      ['to=2026-12-01T06:00:00Z', 'from'],
      ['from=2026-10-01T00:00:00Z&to=2026-12-01T00:00:00Z', 'to'],
      ['range=1h&compare=2d', 'compare'],
      ['from=2026-12-01T00:00:00Z&to=2026-12-01T06:00:00Z&compare=week', 'compare'],
    ];
    for (const [query, parameter] of cases) {
      const response = await get(query);
      expect({ query, status: response.status, type: response.headers.get('content-type') }).toEqual({ query, status: 400, type: 'application/problem+json' });
      const problem = (await response.json()) as { title: string; errors: { path: string; message: string }[] };
      expect(problem.errors.map((error) => error.path)).toEqual([parameter]);
    }
    const ok = await get('range=24h&from=2026-12-01T00:10:30Z&to=2026-12-01T00:40:00Z');
    expect(ok.status).toBe(200);
    expect(await ok.json()).toMatchObject({ absolute: true, range: '1h', stepSeconds: 60, from: '2026-12-01T00:10:00.000Z', to: '2026-12-01T00:40:00.000Z' });
  });

  it('shows the window the address names and keeps it on reload', async () => {
    const page = await ui.pageAs('viewer');
    const now = Date.now();
    const from = minute(now - 40 * 60_000);
    const to = minute(now - 10 * 60_000);
    await page.goto(`${ui.baseUrl}/?range=24h&from=${from}&to=${to}`);
    // The first HTML carries the caption with 'the chosen window' and 'your time zone'; the same
    // caption once hydrated names the window's times and the browser's zone: compare hydrated ones.
    const caption = page.locator('.chart-caption', { hasNotText: 'your time zone' });
    const shown = async () => ({
      url: new URL(page.url()).searchParams.toString(),
      range: await page.getByLabel('Time range').inputValue(),
      caption: await caption.textContent(),
    });
    await caption.waitFor();
    const first = await shown();
    // The window, not the 24 h range: a 30-minute window is read a minute a point.
    expect(first.range).toBe('window');
    expect(first.caption).toContain('one point per 1.0 min');
    expect(first.url).toContain(`from=${encodeURIComponent(from)}`);
    await page.reload();
    await caption.waitFor();
    expect(await shown()).toEqual(first);
    await closeChecked(page);
  }, 90_000);

  it('copies a relative range as an absolute link', async () => {
    const page = await ui.pageAs('viewer');
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: ui.baseUrl });
    const caption = page.locator('.chart-caption');
    // "Copy link" on a relative range writes that range resolved to an absolute window.
    await page.goto(`${ui.baseUrl}/?range=6h`);
    await caption.waitFor();
    await page.getByRole('button', { name: 'Copy link' }).click();
    await page.getByText('Link copied').waitFor();
    const copied = new URL(await page.evaluate(() => navigator.clipboard.readText()));
    expect(copied.origin).toBe(ui.baseUrl);
    const span = Date.parse(copied.searchParams.get('to') ?? '') - Date.parse(copied.searchParams.get('from') ?? '');
    expect(span).toBe(6 * 3_600_000);

    await closeChecked(page);
  }, 90_000);

  it('zooms to the stretch dragged across a chart: from/to in the address, inside the range shown', async () => {
    // A chart is drawn once there is data, and the page asks again only every 30 s: run alone
    // (or first), this test would otherwise wait on the demo traffic's first flush.
    await waitForDemoFlow(db);
    const page = await ui.pageAs('viewer');
    await page.goto(`${ui.baseUrl}/?range=6h`);
    await page.locator('.chart-caption').waitFor();
    const chart = page.locator('.chart-area').first();
    await chart.locator('.recharts-surface').first().waitFor();
    // The mouse acts only on what is in the viewport.
    await chart.scrollIntoViewIfNeeded();
    const box = await chart.boundingBox();
    if (!box) throw new Error('no chart');
    const before = Date.now();
    // From a third of the plot to two thirds, as a hand would.
    await page.mouse.move(box.x + box.width * 0.35, box.y + box.height / 2);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width * 0.5, box.y + box.height / 2, { steps: 5 });
    await page.mouse.move(box.x + box.width * 0.65, box.y + box.height / 2, { steps: 5 });
    // The stretch is shaded while it is dragged.
    expect(await page.locator('.recharts-reference-area').count()).toBe(1);
    await page.mouse.up();
    await page.waitForURL((url) => url.searchParams.has('from') && url.searchParams.has('to'));
    const url = new URL(page.url());
    const from = Date.parse(url.searchParams.get('from') ?? '');
    const to = Date.parse(url.searchParams.get('to') ?? '');
    // Inside the 6 hours shown, and about a third of them (the plot is narrower than the box).
    expect(from).toBeGreaterThan(before - 6 * 3_600_000 - 15 * 60_000);
    expect(to).toBeLessThanOrEqual(Date.now() + 15 * 60_000);
    expect(to - from).toBeGreaterThan(3_600_000);
    expect(to - from).toBeLessThan(3 * 3_600_000);
    await page.getByLabel('Time range').waitFor();
    expect(await page.getByLabel('Time range').inputValue()).toBe('window');
    await closeChecked(page);
  }, 90_000);

  it('says clearly what is wrong with a bad from/to in the address, and shows the range instead', async () => {
    const page = await ui.pageAs('viewer');
    await page.goto(`${ui.baseUrl}/?range=6h&from=2026-12-06T02:00:00Z&to=2026-12-06T01:00:00Z`);
    const notice = page.getByRole('status').filter({ hasText: 'is not after its "from"' });
    await notice.waitFor();
    expect(await notice.textContent()).toContain('The address\'s "to" (2026-12-06T01:00:00Z) is not after its "from" (2026-12-06T02:00:00Z). Showing the range 6h instead.');
    await page.waitForURL((url) => !url.searchParams.has('from'));
    await page.goto(`${ui.baseUrl}/?from=last-tuesday&to=2026-12-06T01:00:00Z`);
    await page.getByRole('status').filter({ hasText: 'The address\'s "from" (last-tuesday) is not an ISO 8601 time' }).waitFor();
    await closeChecked(page);
  });

  it('sends the overview\'s data in the first HTML, so no client fetch comes before the first chart', async () => {
    await waitForDemoFlow(db);
    const response = await fetch(`${ui.baseUrl}/?range=24h`, { headers: { cookie: ui.cookie('viewer') } });
    const html = (await response.text()).replaceAll('\\"', '"');
    // The dehydrated query, under the key the client asks with, holding the server's answer.
    expect(html).toContain('"queryKey":["overview",{"range":"24h","service":null,"scope":null,"from":null,"to":null,"compare":null}]');
    expect(html).toMatch(/"state":\{"data":\{"range":"24h","absolute":false,"stepSeconds":900,/);
    expect(html).toContain('"status":"success"');
    const page = await ui.pageAs('viewer');
    const overviewRequests: string[] = [];
    page.on('request', (request) => {
      if (request.url().includes('/api/admin/overview')) overviewRequests.push(request.url());
    });
    await page.goto(`${ui.baseUrl}/?range=24h&refresh=off`);
    await page.locator('.chart svg.recharts-surface').first().waitFor({ timeout: 50_000 });
    expect(overviewRequests).toEqual([]);
    await closeChecked(page);
  }, 90_000);

  it('puts a key looked up in the /keys address, never its reason; the link prefills the key and still asks for a reason', async () => {
    const page = await ui.pageAs('operator');
    await page.goto(`${ui.baseUrl}/keys`);
    const principal = '0b7f6c1e-3f0a-4c5e-9a39-2f1f4d8e6a11';
    await page.getByLabel('Principal ID').fill(principal);
    await page.getByLabel('Idempotency key').fill('order-4711');
    await page.getByLabel('Reason').fill('ticket 88: a customer asks');
    await page.getByRole('button', { name: 'Look up' }).click();
    await page.getByRole('heading', { name: 'No record' }).waitFor();
    const address = new URL(page.url());
    expect(Object.fromEntries(address.searchParams)).toEqual({ principalId: principal, key: 'order-4711' });
    expect(page.url()).not.toContain('ticket');
    const opened = await ui.pageAs('operator');
    await opened.goto(address.toString());
    expect(await opened.getByLabel('Idempotency key').inputValue()).toBe('order-4711');
    expect(await opened.getByLabel('Principal ID').inputValue()).toBe(principal);
    expect(await opened.getByLabel('Reason').inputValue()).toBe('');
    expect(await opened.getByRole('heading', { name: 'No record' }).count()).toBe(0);
    await closeChecked(opened);
    await closeChecked(page);
  });
});
