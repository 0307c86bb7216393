'use client';
// One time-series chart on the overview's shared time axis: labelled axes with round ticks,
// a tooltip with formatted values, a legend, objectives as threshold lines, and a plain-text
// empty state. The unfinished current step is drawn dashed ("so far"), not as a dip; time
// before any data was recorded is a gap, not zero. Dragging across a chart selects a stretch
// of time (drawn as a band) and zooms to it (onZoom). Events (a policy change, an alert's
// start, a failed sweep) are vertical markers titled with what happened; they are drawn, never
// focused (a chart is not a Tab stop).
import { useRef, useState, type MouseEvent as ReactMouseEvent } from 'react';
import { CartesianGrid, Legend, Line, LineChart, ReferenceArea, ReferenceLine, ResponsiveContainer, Tooltip, XAxis, YAxis, type DotItemDotProps } from 'recharts';
import { lonePoints, valueTicks, type ValueKind } from './axis';
import { useHydrated } from '../local-time';

export interface Series<Point> {
  key: string;
  label: string;
  color: string;
  value: (point: Point) => number | null;
  /** Plot against the right-hand axis (formatted with rightFormat). */
  right?: boolean;
  dashed?: boolean;
  /** A comparison line (the same series earlier): fainter, and every step of it is finished. */
  earlier?: boolean;
}

/** A moment marked on the time axis (the overview JSON's events). */
export interface ChartEvent {
  at: string;
  kind: string;
  text: string;
}

/**
 * Each line with its twin from a compared window (an earlier one, at the same places):
 * dashed and fainter, labelled "<line>, <compared>" (say "Replays, a day earlier"); the lines
 * alone when nothing is compared (`compared` null).
 */
export function withEarlier<Point>(series: Series<Point>[], earlierOf: (point: Point) => Point | null, compared: string | null): Series<Point>[] {
  if (compared === null) return series;
  return [
    ...series,
    ...series.map((line): Series<Point> => {
      const { right, dashed } = line;
      return {
        key: `${line.key}-earlier`,
        label: `${line.label}, ${compared}`,
        color: line.color,
        ...(right === undefined ? {} : { right }),
        ...(dashed === undefined ? {} : { dashed }),
        earlier: true,
        value: (point) => {
          const earlier = earlierOf(point);
          return earlier === null ? null : line.value(earlier);
        },
      };
    }),
  ];
}

const eventGlyph: Record<string, string> = { policy: 'P', alert: '!', alert_end: '✓', sweep_failed: 'S', instance_start: 'R' };

export interface Threshold {
  value: number;
  label: string;
  right?: boolean;
}

/** The time axis every chart of the overview shares. */
export interface TimeAxis {
  from: number;
  to: number;
  ticks: number[];
  format: (ms: number) => string;
  /** Start of the unfinished step (its points are "so far"); null when none is in range. */
  partialFrom: number | null;
  /** Points before this are drawn as a gap (no data was recorded then). */
  dataFrom: number | null;
}

interface Props<Point extends { t: string }> {
  title: string;
  description: string;
  points: Point[];
  series: Series<Point>[];
  format: (value: number) => string;
  kind: ValueKind;
  rightFormat?: (value: number) => string;
  rightKind?: ValueKind;
  thresholds?: Threshold[];
  axis: TimeAxis;
  emptyMessage: string;
  /** Called with the stretch (epoch ms, start < end) dragged across the chart. */
  onZoom?: ((from: number, to: number) => void) | undefined;
  /** Moments to mark (those outside the axis are left out). */
  events?: ChartEvent[] | undefined;
}

const PARTIAL = '~so-far';

type Row = Record<string, number | null>;

export function TimeChart<Point extends { t: string }>({ title, description, points, series, format, kind, rightFormat, rightKind = 'number', thresholds = [], axis, emptyMessage, onZoom, events = [] }: Props<Point>) {
  // The drag under way: where it started and where the pointer is now (epoch ms on the time axis).
  const [drag, setDrag] = useState<{ start: number; end: number } | null>(null);
  // The time under the pointer, from its place in the plot area (the chart's width less its
  // margins and axes, as drawn below): Recharts' own mouse state carries no time unless a tooltip
  // is active, so the pointer's geometry decides, clamped to the axis.
  const area = useRef<HTMLDivElement>(null);
  const plotLeft = 8 + 72;
  const plotRight = rightFormat ? 8 + 56 : 16;
  const timeAt = (clientX: number): number | null => {
    const box = area.current?.getBoundingClientRect();
    if (!box) return null;
    const width = box.width - plotLeft - plotRight;
    if (width <= 0) return null;
    const share = Math.min(1, Math.max(0, (clientX - box.left - plotLeft) / width));
    return Math.round(axis.from + share * (axis.to - axis.from));
  };
  const startDrag = (event: ReactMouseEvent) => {
    if (!onZoom || event.button !== 0) return;
    const at = timeAt(event.clientX);
    if (at !== null) setDrag({ start: at, end: at });
  };
  const moveDrag = (event: ReactMouseEvent) => {
    if (!drag) return;
    const at = timeAt(event.clientX);
    if (at !== null && at !== drag.end) setDrag({ ...drag, end: at });
  };
  const endDrag = () => {
    // A stretch narrower than a minute is a click, not a zoom.
    if (drag && onZoom && Math.abs(drag.end - drag.start) >= 60_000) onZoom(Math.min(drag.start, drag.end), Math.max(drag.start, drag.end));
    setDrag(null);
  };
  const rows: Row[] = points.map((point) => {
    const t = Date.parse(point.t);
    const row: Row = { t };
    for (const line of series) row[line.key] = axis.dataFrom !== null && t < axis.dataFrom ? null : line.value(point);
    return row;
  });
  // Points with no neighbour get a dot: a line draws nothing for them (the only step holding
  // data, as in a 30-day range on a fresh install, would otherwise look like none).
  const lone = new Map(series.map((line) => [line.key, lonePoints(rows.map((row) => row[line.key]))]));
  // The unfinished step: drawn by a dashed twin of each line from the last finished point.
  const partialAt = axis.partialFrom === null ? -1 : rows.findIndex((row) => (row.t ?? 0) >= (axis.partialFrom ?? Infinity));
  if (partialAt >= 0) {
    rows.forEach((row, index) => {
      for (const line of series) {
        if (line.earlier) continue;
        row[`${line.key}${PARTIAL}`] = index >= partialAt - 1 ? (row[line.key] ?? null) : null;
        if (index >= partialAt) row[line.key] = null;
      }
    });
  }
  const hasData = rows.some((row) => series.some((line) => typeof row[line.key] === 'number' && row[line.key] !== 0) || series.some((line) => typeof row[`${line.key}${PARTIAL}`] === 'number' && row[`${line.key}${PARTIAL}`] !== 0));
  const maxOf = (right: boolean) =>
    Math.max(
      0,
      ...rows.flatMap((row) => series.filter((line) => Boolean(line.right) === right).flatMap((line) => [row[line.key], row[`${line.key}${PARTIAL}`]]).filter((value): value is number => typeof value === 'number')),
      ...thresholds.filter((threshold) => Boolean(threshold.right) === right).map((threshold) => threshold.value * 1.1),
    );
  const leftTicks = valueTicks(maxOf(false), kind);
  const rightTicks = rightFormat ? valueTicks(maxOf(true), rightKind) : [];
  const hydrated = useHydrated();
  const shownEvents = events.filter((event) => Date.parse(event.at) >= axis.from && Date.parse(event.at) <= axis.to);
  const lineOf = (key: string) => series.find((line) => line.key === key.replace(PARTIAL, ''));
  const formatFor = (key: string) => (lineOf(key)?.right ? (rightFormat ?? format) : format);
  return (
    <figure className="card chart" aria-label={title}>
      <figcaption>
        <h3>{title}</h3>
        <p className="muted small">{description}</p>
      </figcaption>
      {hasData ? (
        <div
          className="chart-area"
          ref={area}
          onMouseDown={startDrag}
          onMouseMove={moveDrag}
          onMouseUp={endDrag}
          onMouseLeave={() => setDrag(null)}
          style={onZoom ? { cursor: 'crosshair', userSelect: 'none' } : undefined}
        >
          {!hydrated ? (
            <FirstDrawing rows={rows} series={series} axis={axis} leftMax={leftTicks.at(-1) ?? 1} rightMax={rightTicks.at(-1) ?? 1} hasRight={Boolean(rightFormat)} events={shownEvents} />
          ) : (
          <ResponsiveContainer width="100%" height={220}>
            {/* No accessibility layer: it makes each chart an unnamed Tab stop (role "application")
                whose arrow keys only move the tooltip; the figure's caption names the chart. */}
            <LineChart
              accessibilityLayer={false}
              data={rows}
              margin={{ top: 8, right: rightFormat ? 8 : 16, bottom: 0, left: 8 }}
            >
              <CartesianGrid stroke="var(--grid)" strokeDasharray="3 3" />
              <XAxis dataKey="t" type="number" scale="time" domain={[axis.from, axis.to]} ticks={axis.ticks} tickFormatter={axis.format} stroke="var(--muted)" fontSize={12} allowDataOverflow />
              <YAxis yAxisId="left" domain={[0, leftTicks.at(-1) ?? 1]} ticks={leftTicks} tickFormatter={format} width={72} stroke="var(--muted)" fontSize={12} />
              {rightFormat ? <YAxis yAxisId="right" orientation="right" domain={[0, rightTicks.at(-1) ?? 1]} ticks={rightTicks} tickFormatter={rightFormat} width={56} stroke="var(--muted)" fontSize={12} /> : null}
              <Tooltip
                content={({ active, payload, label }) => {
                  if (!active || payload.length === 0) return null;
                  const row = payload[0]?.payload as Row | undefined;
                  const partial = axis.partialFrom !== null && typeof label === 'number' && label >= axis.partialFrom;
                  return (
                    <div className="chart-tooltip">
                      <div className="muted small">
                        {typeof label === 'number' ? axis.format(label) : ''}
                        {partial ? ' (so far: this step is not over)' : ''}
                      </div>
                      {series.map((line) => {
                        const value = row?.[line.key] ?? row?.[`${line.key}${PARTIAL}`] ?? null;
                        return (
                          <div key={line.key}>
                            <span style={{ color: line.color }} aria-hidden="true">
                              ●
                            </span>{' '}
                            {line.label}: {typeof value === 'number' ? formatFor(line.key)(value) : '—'}
                          </div>
                        );
                      })}
                    </div>
                  );
                }}
              />
              <Legend formatter={(value: string) => lineOf(value)?.label ?? value} />
              {thresholds.map((threshold) => (
                <ReferenceLine
                  key={threshold.label}
                  yAxisId={threshold.right ? 'right' : 'left'}
                  y={threshold.value}
                  stroke="var(--threshold)"
                  strokeDasharray="6 3"
                  label={{ value: threshold.label, position: 'insideTopRight', fill: 'var(--fg)', fontSize: 11 }}
                />
              ))}
              {drag && drag.start !== drag.end ? <ReferenceArea yAxisId="left" x1={Math.min(drag.start, drag.end)} x2={Math.max(drag.start, drag.end)} fill="var(--c1)" fillOpacity={0.15} ifOverflow="hidden" /> : null}
              {series.map((line) => (
                <Line
                  key={line.key}
                  yAxisId={line.right ? 'right' : 'left'}
                  dataKey={line.key}
                  stroke={line.color}
                  strokeWidth={2}
                  strokeDasharray={line.dashed || line.earlier ? '5 4' : undefined}
                  strokeOpacity={line.earlier ? 0.55 : undefined}
                  dot={loneDot(lone.get(line.key), line.color, 0, false)}
                  connectNulls={false}
                  isAnimationActive={false}
                />
              ))}
              {shownEvents.map((event, index) => (
                  <ReferenceLine
                    key={`event-${index}`}
                    yAxisId="left"
                    x={Date.parse(event.at)}
                    stroke="var(--muted)"
                    strokeDasharray="1 3"
                    ifOverflow="hidden"
                    className="chart-event"
                    label={({ viewBox }: { viewBox?: { x?: number; y?: number } }) => (
                      <g className="chart-event-marker" data-kind={event.kind}>
                        <title>{`${axis.format(Date.parse(event.at))}: ${event.text}`}</title>
                        <text x={viewBox?.x ?? 0} y={(viewBox?.y ?? 0) + 10} textAnchor="middle" fontSize={10} fill="var(--fg)">
                          {eventGlyph[event.kind] ?? '•'}
                        </text>
                      </g>
                    )}
                  />
                ))}
              {partialAt >= 0
                ? series.filter((line) => !line.earlier).map((line) => (
                    <Line
                      key={`${line.key}${PARTIAL}`}
                      yAxisId={line.right ? 'right' : 'left'}
                      dataKey={`${line.key}${PARTIAL}`}
                      stroke={line.color}
                      strokeWidth={2}
                      strokeOpacity={0.6}
                      strokeDasharray="2 3"
                      dot={loneDot(lone.get(line.key), line.color, partialAt, true)}
                      legendType="none"
                      connectNulls={false}
                      isAnimationActive={false}
                    />
                  ))
                : null}
            </LineChart>
          </ResponsiveContainer>
          )}
        </div>
      ) : (
        <p className="empty">{emptyMessage}</p>
      )}
    </figure>
  );
}

/**
 * The lines as plain SVG in the first HTML, before the page's script runs: the server-rendered
 * answer is drawn at first paint (Recharts measures its container and draws only after
 * hydration, which replaces this). Lines only, stretched to the chart's box; no axes or text.
 */
function FirstDrawing<Point>({ rows, series, axis, leftMax, rightMax, hasRight, events }: { rows: Row[]; series: Series<Point>[]; axis: TimeAxis; leftMax: number; rightMax: number; hasRight: boolean; events: ChartEvent[] }) {
  // The plot area within a 1000 x 220 box, near where Recharts puts it (axes, legend).
  const box = { left: 80, right: 1000 - (hasRight ? 64 : 16), top: 8, bottom: 220 - 62 };
  const x = (t: number) => box.left + ((t - axis.from) / Math.max(1, axis.to - axis.from)) * (box.right - box.left);
  const y = (value: number, right: boolean) => box.bottom - (value / Math.max(Number.MIN_VALUE, right ? rightMax : leftMax)) * (box.bottom - box.top);
  const pathOf = (key: string, right: boolean) => {
    let d = '';
    let pen = false;
    for (const row of rows) {
      const value = row[key];
      if (typeof value !== 'number' || typeof row.t !== 'number') {
        pen = false;
        continue;
      }
      d += `${pen ? 'L' : 'M'}${x(row.t).toFixed(1)} ${y(value, right).toFixed(1)}`;
      pen = true;
    }
    return d;
  };
  return (
    <svg className="chart-first-drawing" width="100%" height={220} viewBox="0 0 1000 220" preserveAspectRatio="none" aria-hidden="true" focusable="false">
      {series.flatMap((line) =>
        (line.earlier ? [line.key] : [line.key, `${line.key}${PARTIAL}`]).map((key) => (
          <path
            key={key}
            className="chart-line"
            d={pathOf(key, Boolean(line.right))}
            fill="none"
            stroke={line.color}
            strokeWidth={2}
            strokeDasharray={key.endsWith(PARTIAL) ? '2 3' : line.dashed || line.earlier ? '5 4' : undefined}
            strokeOpacity={line.earlier ? 0.55 : undefined}
            vectorEffect="non-scaling-stroke"
          />
        )),
      )}
      {events.map((event, index) => (
        <line key={`event-${index}`} className="chart-event" data-kind={event.kind} x1={x(Date.parse(event.at))} x2={x(Date.parse(event.at))} y1={box.top} y2={box.bottom} stroke="var(--muted)" strokeDasharray="1 3" vectorEffect="non-scaling-stroke">
          {/* No time here: the server's time zone is not the reader's (the page would not hydrate). */}
          <title>{event.text}</title>
        </line>
      ))}
    </svg>
  );
}

/**
 * A dot for each lone point of a line from index `from` on, nothing elsewhere: filled on a line
 * of finished steps (from 0), hollow on the dashed "so far" twin (from the unfinished step).
 */
function loneDot(lone: Set<number> | undefined, color: string, from: number, partial: boolean) {
  if (lone === undefined || lone.size === 0) return false;
  return function LoneDot({ cx, cy, index, value }: DotItemDotProps) {
    if (index < from || !lone.has(index) || typeof value !== 'number' || typeof cx !== 'number' || typeof cy !== 'number') return null;
    return <circle key={index} className={partial ? 'chart-lone-point partial' : 'chart-lone-point'} cx={cx} cy={cy} r={3.5} stroke={color} strokeWidth={2} fill={partial ? 'var(--card)' : color} />;
  };
}
