// Events and comparison on the overview (issue #31 point 5) in Chromium against the built server
// with demo traffic: a policy change (and the server's start) marked on every time chart, titled with what happened and
// never a Tab stop; "Compare with" puts compare in the address and draws dashed, labelled lines.
import { describe, expect, it } from 'vitest';
import { hasChromium } from '../helpers/browser';
import { useTestDatabase } from '../helpers/database';
import { closeChecked, useSignedInBrowser, waitForDemoFlow } from '../helpers/signed-in-browser';

describe.skipIf(!hasChromium)('events and comparison on the overview', () => {
  const db = useTestDatabase();
  const ui = useSignedInBrowser(db, { domain: 'events.example', env: { DEMO_TRAFFIC: '1', METRICS_FLUSH_SECONDS: '1' } });

  it('marks a policy change on every chart and draws the flow a day earlier dashed, set by the select', async () => {
    await db.pool.query(
      `INSERT INTO endpoint_policies (service, endpoint, scope_mode, retry_window_seconds, retention_seconds, lease_ms, lock_timeout_ms, max_response_bytes, live_key_quota, updated_by)
       VALUES ('demo', 'POST /marked', 'endpoint', 86400, 93600, 30000, 5000, 4096, 100000, 'test');
       INSERT INTO endpoint_policy_history (service, endpoint, version, changed_at, changed_by, reason, previous, current)
       VALUES ('demo', 'POST /marked', 2, now() - interval '20 minutes', 'test', 'e2e', '{}', '{}')`,
    );
    await waitForDemoFlow(db);
    const page = await ui.pageAs('viewer');
    await page.goto(`${ui.baseUrl}/?range=1h&refresh=off`);
    await page.locator('.chart svg.recharts-surface').first().waitFor({ timeout: 50_000 });
    const marked = page.locator('.chart-event-marker[data-kind="policy"]');
    await marked.first().waitFor({ state: 'attached' });
    // Charts are drawn by Recharts one after another after hydration: wait for more than two.
    await expect.poll(() => page.locator('.chart .recharts-wrapper').count(), { timeout: 30_000 }).toBeGreaterThan(2);
    // Every chart drawn (a chart with no data says so instead) carries the mark, once, titled
    // with what happened (the demo's own policies, created at its start, are marked too).
    const drawn = await page.locator('.chart').evaluateAll((charts) =>
      charts
        .filter((chart) => chart.querySelector('.recharts-wrapper'))
        .map((chart) => [...chart.querySelectorAll('.chart-event-marker[data-kind="policy"] title')].filter((title) => title.textContent.includes('Policy changed: POST /marked (demo), version 2')).length),
    );
    expect(drawn.length).toBeGreaterThan(2);
    expect(drawn).toEqual(drawn.map(() => 1));
    // This server's own start is marked too (its demo service's instance, recorded by createRetrysafe), with the package version it runs.
    const started = page.locator('.chart-event-marker[data-kind="instance_start"] title').first();
    await started.waitFor({ state: 'attached' });
    expect(await started.textContent()).toMatch(/Instance of demo started \(.+:\d+\), @retrysafe\/store \d+\.\d+\.\d+/);
    // No mark (nor anything else of a chart) is in the Tab order.
    const stops = await page.evaluate(() =>
      [...document.querySelectorAll('figure.chart svg, figure.chart [tabindex], .chart-event-marker, .chart-event-marker *')].filter((element) => (element as HTMLElement | SVGElement).tabIndex >= 0).length,
    );
    expect(stops).toBe(0);

    await page.getByLabel('Compare with').selectOption('1d');
    await page.waitForURL((url) => url.searchParams.get('compare') === '1d');
    await page.getByText('Replays, a day earlier').first().waitFor();
    const dashed = page.locator('.chart path.recharts-line-curve[stroke-dasharray="5 4"][stroke-opacity="0.55"]');
    await dashed.first().waitFor({ state: 'attached' });
    expect(await dashed.count()).toBeGreaterThanOrEqual(3);
    await closeChecked(page);
  }, 400_000);
});
