// Units for people: bytes, durations, rates and times as an operator reads them at 3 a.m.
const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

export function formatBytes(bytes: number): string {
  let value = bytes;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < BYTE_UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value >= 100 || unit === 0 ? Math.round(value) : value.toFixed(1)} ${BYTE_UNITS[unit] ?? 'B'}`;
}

export function formatDuration(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds)) return '—';
  if (seconds < 60) return `${Math.round(seconds)} s`;
  if (seconds < 3_600) return `${seconds < 600 ? (seconds / 60).toFixed(1) : Math.round(seconds / 60)} min`;
  // Up to two days in hours, so a 24 h window and a 26 h retention read as such.
  if (seconds < 172_800) return `${(seconds / 3_600).toFixed(Number.isInteger(seconds / 3_600) ? 0 : 1)} h`;
  return `${(seconds / 86_400).toFixed(1)} d`;
}

export function formatCount(value: number): string {
  return new Intl.NumberFormat('en', { notation: value >= 100_000 ? 'compact' : 'standard', maximumFractionDigits: 1 }).format(value);
}

/**
 * A sweep run's rows as the overview's "Last sweep" says them. In the partitioned layout a run's
 * rows are those of the partitions it dropped and the keys promised less than a day it deleted
 * (server/retention/sweeper.ts), so neither alone names them.
 */
export function formatSweptRows(rows: number, layout: 'plain' | 'partitioned'): string {
  const counted = formatRowsDeleted(rows);
  return layout === 'partitioned' ? `${counted} (ended day partitions dropped, keys promised less than a day deleted)` : counted;
}

/** "1 row deleted", "1,234 rows deleted": the sweeper's count as the overview and the Retention page say it. */
export function formatRowsDeleted(rows: number): string {
  return `${formatCount(rows)} ${rows === 1 ? 'row' : 'rows'} deleted`;
}

export function formatRate(perSecond: number): string {
  if (perSecond === 0) return '0/s';
  if (perSecond < 0.01) return `${(perSecond * 60).toFixed(2)}/min`;
  return `${perSecond < 10 ? perSecond.toFixed(2) : Math.round(perSecond)}/s`;
}

export function formatPercent(share: number): string {
  return `${(share * 100).toFixed(share < 0.1 ? 1 : 0)}%`;
}

/** Axis ticks: time of day for ranges within a day, else day and hour. */
export function timeTick(rangeSeconds: number): (iso: string) => string {
  const options: Intl.DateTimeFormatOptions = rangeSeconds <= 86_400 ? { hour: '2-digit', minute: '2-digit' } : { month: 'short', day: 'numeric', hour: '2-digit' };
  const format = new Intl.DateTimeFormat(undefined, options);
  return (iso: string) => format.format(new Date(iso));
}

export function formatDateTime(iso: string | null): string {
  if (!iso) return '—';
  return new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' }).format(new Date(iso));
}
