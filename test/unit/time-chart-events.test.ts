// The overview charts' events and comparison (#31 point 5) as the server draws them before
// hydration: a marker per event on the axis, titled with what happened and never focusable,
// and the compared window's lines dashed and fainter beside their own, with their own labels.
import { createElement } from 'react';
import { renderToStaticMarkup } from 'react-dom/server';
import { describe, expect, it } from 'vitest';
import { TimeChart, withEarlier, type Series, type TimeAxis } from '../../components/overview/time-chart';

type Point = { t: string; n: number; earlier: { t: string; n: number; earlier: null } | null };

const from = Date.parse('2026-12-06T01:00:00Z');
const points: Point[] = [0, 1, 2, 3].map((i) => ({ t: new Date(from + i * 60_000).toISOString(), n: i + 1, earlier: { t: new Date(from - 86_400_000 + i * 60_000).toISOString(), n: 10 * i, earlier: null } }));
const axis: TimeAxis = { from, to: from + 4 * 60_000, ticks: [], format: (ms) => new Date(ms).toISOString().slice(11, 16), partialFrom: null, dataFrom: null };
const series: Series<Point>[] = [{ key: 'n', label: 'Replays', color: 'red', value: (point) => point.n }];

const render = (compared: string | null, events: { at: string; kind: string; text: string }[]) =>
  renderToStaticMarkup(
    createElement(TimeChart<Point>, {
      title: 'Replays',
      description: 'd',
      points,
      series: withEarlier(series, (point) => point.earlier, compared),
      format: String,
      kind: 'number',
      axis,
      emptyMessage: 'none',
      events,
    }),
  );

describe('time chart events and comparison', () => {
  it('marks each event inside the axis with its text, and none outside it, with nothing focusable', () => {
    const html = render(null, [
      { at: '2026-12-06T01:02:00Z', kind: 'policy', text: 'Policy changed: POST /a (demo), version 2' },
      { at: '2026-12-05T23:00:00Z', kind: 'sweep_failed', text: 'Sweep run 7 failed' },
    ]);
    expect(html.match(/class="chart-event"/g)).toHaveLength(1);
    expect(html).toContain('<title>Policy changed: POST /a (demo), version 2</title>');
    expect(html).not.toContain('Sweep run 7');
    expect(html).not.toMatch(/tabindex/i);
  });

  it("marks an alert's end and a server's start like the others, each with its own kind and text", () => {
    const html = render(null, [
      { at: '2026-12-06T01:01:00Z', kind: 'alert_end', text: 'Alert ended after 12 min: No sweep has finished for 15 min' },
      { at: '2026-12-06T01:03:00Z', kind: 'instance_start', text: 'Retrysafe server started (host:41), @retrysafe/store 0.1.0' },
    ]);
    expect([...html.matchAll(/class="chart-event" data-kind="([a-z_]+)"/g)].map((match) => match[1])).toEqual(['alert_end', 'instance_start']);
    expect(html).toContain('<title>Alert ended after 12 min: No sweep has finished for 15 min</title>');
    expect(html).toContain('<title>Retrysafe server started (host:41), @retrysafe/store 0.1.0</title>');
  });

  it('draws the compared window dashed and fainter beside each line, labelled, and nothing more without it', () => {
    const compared = withEarlier(series, (point) => point.earlier, 'a day earlier');
    expect(compared.map((line) => [line.key, line.label, line.earlier ?? false])).toEqual([
      ['n', 'Replays', false],
      ['n-earlier', 'Replays, a day earlier', true],
    ]);
    expect(points.map((point) => compared[1]?.value(point))).toEqual([0, 10, 20, 30]);
    const paths = [...render('a day earlier', []).matchAll(/<path [^>]*>/g)].map((match) => match[0]);
    // The line, its "so far" twin, and the earlier line (all of whose steps are over).
    expect(paths).toHaveLength(3);
    expect(paths.filter((path) => path.includes('stroke-dasharray="5 4"') && path.includes('stroke-opacity="0.55"'))).toHaveLength(1);
    expect(paths.filter((path) => !path.includes('stroke-dasharray'))).toHaveLength(1);
    expect(withEarlier(series, (point) => point.earlier, null)).toEqual(series);
  });
});
