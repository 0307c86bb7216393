// Round axis ticks: times on local-clock boundaries (every 10 min, hour, 3 h, day, 5 days) and
// values on 1-2-2.5-5 steps of their unit (bytes in powers of 1024, durations in s, min, h, d),
// so an operator reads "20 ms" and "14:00", never "19.7 ms" and "13:57".
import type { OverviewSearch } from './search-params';

const MINUTE = 60_000;
const HOUR = 3_600_000;
const tickSpacing: Record<OverviewSearch['range'], { ms: number; days?: number }> = {
  '1h': { ms: 10 * MINUTE },
  '6h': { ms: HOUR },
  '24h': { ms: 3 * HOUR },
  '7d': { ms: 24 * HOUR, days: 1 },
  '30d': { ms: 5 * 24 * HOUR, days: 5 },
};

/** Tick times (epoch ms) within [from, to] on round local-clock boundaries. */
export function timeTicks(range: OverviewSearch['range'], from: number, to: number): number[] {
  const spacing = tickSpacing[range];
  const ticks: number[] = [];
  if (spacing.days !== undefined) {
    const day = new Date(from);
    day.setHours(0, 0, 0, 0);
    while (day.getTime() < from) day.setDate(day.getDate() + 1);
    // Local midnights (a DST day is 23 or 25 hours); every 5 days: the 1st, 6th, 11th... of a month.
    for (; day.getTime() <= to; day.setDate(day.getDate() + 1)) {
      if (spacing.days === 1 || (day.getDate() <= 26 && (day.getDate() - 1) % spacing.days === 0)) ticks.push(day.getTime());
    }
    return ticks;
  }
  const offset = -new Date(from).getTimezoneOffset() * MINUTE;
  for (let t = Math.ceil((from + offset) / spacing.ms) * spacing.ms - offset; t <= to; t += spacing.ms) ticks.push(t);
  return ticks;
}

/** `count`: whole things (stale claims), so whole-number ticks only. */
export type ValueKind = 'number' | 'count' | 'bytes' | 'seconds' | 'share';

const durationSteps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1_800, 3_600, 7_200, 10_800, 21_600, 43_200, 86_400, 172_800, 432_000, 864_000];

/** About four round ticks from 0 to at least `max`. */
export function valueTicks(max: number, kind: ValueKind): number[] {
  const top = max > 0 && Number.isFinite(max) ? max : 1;
  let step: number;
  if (kind === 'seconds') {
    step = durationSteps.find((candidate) => top / candidate <= 4) ?? Math.ceil(top / 4 / 864_000) * 864_000;
  } else {
    const unit = kind === 'bytes' ? 1024 ** Math.max(0, Math.floor(Math.log(top) / Math.log(1024))) : 1;
    const scaled = top / unit / 4;
    const magnitude = 10 ** Math.floor(Math.log10(scaled));
    const nice = [1, 2, 2.5, 5, 10].find((factor) => factor * magnitude >= scaled) ?? 10;
    step = nice * magnitude * unit;
    if (kind === 'count') step = Math.max(1, Math.ceil(step));
  }
  const ticks: number[] = [];
  for (let value = 0; value < top + step * 1e-9; value += step) ticks.push(Number(value.toPrecision(12)));
  if ((ticks.at(-1) ?? 0) < top) ticks.push(Number(((ticks.at(-1) ?? 0) + step).toPrecision(12)));
  return ticks;
}

/** The browser's time zone and its current offset, for the charts' caption. */
export function timeZoneText(): string {
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  const offset = new Intl.DateTimeFormat('en', { timeZoneName: 'shortOffset' }).formatToParts(new Date()).find((part) => part.type === 'timeZoneName')?.value ?? '';
  return `${zone}${offset ? ` (${offset})` : ''}`;
}

/**
 * The indexes of points a line would leave undrawn: a value whose neighbours are both gaps has
 * no segment, so a chart must mark it (a lone point, such as the only step of a 30-day range
 * that holds data, would otherwise look like no data at all).
 */
export function lonePoints(values: readonly (number | null | undefined)[]): Set<number> {
  const isValue = (value: number | null | undefined) => typeof value === 'number';
  const lone = new Set<number>();
  values.forEach((value, index) => {
    if (isValue(value) && !isValue(values[index - 1]) && !isValue(values[index + 1])) lone.add(index);
  });
  return lone;
}
