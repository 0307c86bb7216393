'use client';
// One time-series chart: labelled axes with units, a tooltip with formatted values, a legend,
// and a plain-text empty state. Lines on the left axis; optionally one series on a right axis.
import { CartesianGrid, Legend, Line, LineChart, ResponsiveContainer, Tooltip, XAxis, YAxis } from 'recharts';

export interface Series<Point> {
  key: string;
  label: string;
  color: string;
  value: (point: Point) => number | null;
  /** Plot against the right-hand axis (formatted with rightFormat). */
  right?: boolean;
  dashed?: boolean;
}

interface Props<Point extends { t: string }> {
  title: string;
  description: string;
  points: Point[];
  series: Series<Point>[];
  format: (value: number) => string;
  rightFormat?: (value: number) => string;
  /** The right axis counts things: whole-number ticks only. */
  rightIntegers?: boolean;
  tick: (iso: string) => string;
  emptyMessage: string;
}

export function TimeChart<Point extends { t: string }>({ title, description, points, series, format, rightFormat, rightIntegers, tick, emptyMessage }: Props<Point>) {
  const rows = points.map((point) => Object.fromEntries([['t', point.t], ...series.map((line) => [line.key, line.value(point)])]) as Record<string, string | number | null>);
  const hasData = rows.some((row) => series.some((line) => typeof row[line.key] === 'number' && row[line.key] !== 0));
  const formatFor = (key: string) => (series.find((line) => line.key === key)?.right ? (rightFormat ?? format) : format);
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
              <XAxis dataKey="t" tickFormatter={tick} minTickGap={40} stroke="var(--muted)" fontSize={12} />
              <YAxis yAxisId="left" tickFormatter={format} width={72} stroke="var(--muted)" fontSize={12} />
              {rightFormat ? <YAxis yAxisId="right" orientation="right" tickFormatter={rightFormat} allowDecimals={!rightIntegers} width={56} stroke="var(--muted)" fontSize={12} /> : null}
              <Tooltip
                labelFormatter={(label) => (typeof label === 'string' ? tick(label) : '')}
                formatter={(value, name) => [typeof value === 'number' ? formatFor(String(name))(value) : '—', series.find((line) => line.key === name)?.label ?? String(name)]}
                contentStyle={{ background: 'var(--card)', border: '1px solid var(--border)', color: 'var(--fg)' }}
              />
              <Legend formatter={(value: string) => series.find((line) => line.key === value)?.label ?? value} />
              {series.map((line) => (
                <Line
                  key={line.key}
                  yAxisId={line.right ? 'right' : 'left'}
                  dataKey={line.key}
                  stroke={line.color}
                  strokeWidth={2}
                  strokeDasharray={line.dashed ? '5 4' : undefined}
                  dot={false}
                  connectNulls={false}
                  isAnimationActive={false}
                />
              ))}
            </LineChart>
          </ResponsiveContainer>
        </div>
      ) : (
        <p className="empty">{emptyMessage}</p>
      )}
    </figure>
  );
}
