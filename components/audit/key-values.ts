// An audit entry's target and details as short key=value pairs for the table, never a wall
// of JSON: nested objects become dotted keys, a {from, to} change reads "from→to", and long
// values are shortened (the full value stays in the pair's title and in the CSV export).
export interface KeyValue {
  key: string;
  value: string;
  /** The whole value when `value` was shortened. */
  full?: string;
}

const MAX_VALUE = 60;

function scalar(value: unknown): string {
  if (value === null || value === undefined) return '—';
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  return JSON.stringify(value);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isChange(value: Record<string, unknown>): value is { from: unknown; to: unknown } {
  const keys = Object.keys(value);
  return keys.length === 2 && 'from' in value && 'to' in value;
}

function flatten(prefix: string, value: unknown, into: { key: string; text: string }[]): void {
  if (isRecord(value)) {
    if (isChange(value)) {
      const from = scalar(value.from);
      const to = scalar(value.to);
      into.push({ key: prefix, text: from === to ? to : `${from}→${to}` });
      return;
    }
    const entries = Object.entries(value);
    if (entries.length === 0) into.push({ key: prefix, text: '(none)' });
    for (const [key, inner] of entries) flatten(prefix ? `${prefix}.${key}` : key, inner, into);
    return;
  }
  if (Array.isArray(value)) {
    into.push({ key: prefix, text: value.every((item) => !isRecord(item) && !Array.isArray(item)) ? value.map(scalar).join(', ') : `${value.length} items` });
    return;
  }
  into.push({ key: prefix, text: scalar(value) });
}

export function keyValues(value: Record<string, unknown> | null): KeyValue[] {
  if (!value || Object.keys(value).length === 0) return [];
  const pairs: { key: string; text: string }[] = [];
  flatten('', value, pairs);
  return pairs.map(({ key, text }) => (text.length > MAX_VALUE ? { key, value: `${text.slice(0, MAX_VALUE - 1)}…`, full: text } : { key, value: text }));
}
