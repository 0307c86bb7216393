// The overview's check banners rendered as the server renders them (#31 point 3): a pending
// check shows in amber with since when and how many of its minutes it has held, never with the
// passed checks' tick; a firing one keeps the alert banner; an ok one is a passed row.
import { createElement } from 'react';
import { renderToStaticMarkup } from 'react-dom/server';
import { describe, expect, it } from 'vitest';
import { CheckBanners } from '../../components/overview/checks';
import type { OverviewJson } from '../../server/metrics/overview';

type Check = OverviewJson['checks'][number];

const base: Check = {
  name: 'conflict_rate',
  title: 'Conflict share',
  state: 'ok',
  firing: false,
  severity: 'warning',
  service: 'demo',
  scope: 'POST /api/v1/refunds',
  storeWide: false,
  value: '2%',
  threshold: 'over 10% for 5 min',
  since: null,
  forMinutes: 5,
  heldMinutes: null,
  link: 'principals',
  summary: '',
  action: '',
};

const render = (checks: Check[]) => renderToStaticMarkup(createElement(CheckBanners, { checks, search: { range: '1h', refresh: '30' } }));

describe('check banners', () => {
  it('shows a pending check in amber with since HH:MM and N of M min, and no tick anywhere', () => {
    const html = render([
      { ...base, state: 'pending', value: '13.5%', since: '2026-12-06T02:03:00.000Z', heldMinutes: 2 },
      { ...base, name: 'mismatch_rate', title: 'Mismatch share', value: '0%', threshold: 'over 5% for 5 min' },
    ]);
    expect(html).toMatch(/<article class="banner pending" aria-label="Pending: Conflict share: Scope POST \/api\/v1\/refunds of demo">/);
    expect(html).toContain('Now <strong>13.5%</strong>, fires when over 10% for 5 min · since <time dateTime="2026-12-06T02:03:00.000Z" title="2026-12-06T02:03:00.000Z">02:03 UTC</time>, 2 of 5 min');
    // The one tick is the passed mismatch check's row; the pending check is not among the passed.
    expect(html.match(/✓/g)).toHaveLength(1);
    const passedTable = html.slice(html.indexOf('<table'));
    expect(passedTable).toContain('Mismatch share');
    expect(passedTable).not.toContain('Conflict share');
    expect(html).toContain('No alert is firing: 1 pending, 1 of 2 checks passed.');
    expect(html).toContain('Checks passed (1 of 2)');
  });

  it('keeps the firing banner for a firing check, and says all passed only when all did', () => {
    const firing = render([{ ...base, state: 'firing', firing: true, value: '40%', since: '2026-12-06T01:55:00.000Z', heldMinutes: 8, summary: 'Over 10%', action: 'Find them' }]);
    expect(firing).toContain('<article class="banner warning"');
    expect(firing).toContain('<strong>Warning: Conflict share</strong>');
    expect(firing).not.toContain('✓');
    expect(render([base])).toContain('No alert is firing: all 1 checks passed.');
  });
});
