'use client';
// One time-series chart on the overview's shared time axis: labelled axes with round ticks,
// a tooltip with formatted values, a legend, objectives as threshold lines, and a plain-text
// empty state. The unfinished current step is drawn dashed ("so far"), not as a dip; time
// before any data was recorded is a gap, not zero.
import { CartesianGrid, Legend, Line, LineChart, ReferenceLine, ResponsiveContainer, Tooltip, XAxis, YAxis, type DotItemDotProps } from 'recharts';
import { lonePoints, valueTicks, type ValueKind } from './axis';

export interface Series<Point> {
  key: string;
  label: string;
  color: string;
  value: (point: Point) => number | null;
  /** Plot against the right-hand axis (formatted with rightFormat). */
  right?: boolean;
  dashed?: boolean;
}

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
}

const PARTIAL = '~so-far';

type Row = Record<string, number | null>;

export function TimeChart<Point extends { t: string }>({ title, description, points, series, format, kind, rightFormat, rightKind = 'number', thresholds = [], axis, emptyMessage }: Props<Point>) {
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
  const lineOf = (key: string) => series.find((line) => line.key === key.replace(PARTIAL, ''));
  const formatFor = (key: string) => (lineOf(key)?.right ? (rightFormat ?? format) : format);
  return (
    <figure className="card chart" aria-label={title}>
      <figcaption>
        <h3>{title}</h3>
        <p className="muted small">{description}</p>
      </figcaption>
      {hasData ? (
        <div className="chart-area">
          <ResponsiveContainer width="100%" height={220}>
            <LineChart data={rows} margin={{ top: 8, right: rightFormat ? 8 : 16, bottom: 0, left: 8 }}>
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
              {series.map((line) => (
                <Line
                  key={line.key}
                  yAxisId={line.right ? 'right' : 'left'}
                  dataKey={line.key}
                  stroke={line.color}
                  strokeWidth={2}
                  strokeDasharray={line.dashed ? '5 4' : undefined}
                  dot={loneDot(lone.get(line.key), line.color, 0, false)}
                  connectNulls={false}
                  isAnimationActive={false}
                />
              ))}
              {partialAt >= 0
                ? series.map((line) => (
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
        </div>
      ) : (
        <p className="empty">{emptyMessage}</p>
      )}
    </figure>
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
