// A policy's fields in the operator's words and units: "Retention 26 h", "Lease 30 s",
// "Largest stored response 4 KiB", never retentionSeconds or 93600. Plain data and functions
// with no imports, for the server's refusals and the dashboard's forms and audit log alike.
export const policyFieldLabels = {
  scopeMode: 'Scope',
  retryWindowSeconds: 'Retry window',
  retentionSeconds: 'Retention',
  leaseMs: 'Lease',
  lockTimeoutMs: 'Lock wait',
  maxResponseBytes: 'Largest stored response',
  liveKeyQuota: 'Live-key quota',
} as const;

export type PolicyFieldName = keyof typeof policyFieldLabels;

export function isPolicyField(name: string): name is PolicyFieldName {
  return Object.hasOwn(policyFieldLabels, name);
}

/** A duration in seconds as an operator says it: 45 s, 30 min, 26 h, 1.5 h, 7 d. */
export function durationWords(seconds: number): string {
  const round = (value: number) => Number(value.toFixed(2)).toString();
  if (Math.abs(seconds) < 60) return `${round(seconds)} s`;
  if (Math.abs(seconds) < 3_600) return `${round(seconds / 60)} min`;
  if (Math.abs(seconds) < 172_800) return `${round(seconds / 3_600)} h`;
  return `${round(seconds / 86_400)} d`;
}

function bytesWords(bytes: number): string {
  if (bytes >= 1_048_576 && bytes % 1_048_576 === 0) return `${bytes / 1_048_576} MiB`;
  if (bytes >= 1_024 && bytes % 1_024 === 0) return `${bytes / 1_024} KiB`;
  return `${bytes.toLocaleString('en')} bytes`;
}

/** A field's value in its unit. */
export function policyValueWords(field: PolicyFieldName, value: unknown): string {
  if (typeof value !== 'number') {
    if (field === 'scopeMode') return value === 'intent' ? 'principal only (intent)' : value === 'endpoint' ? 'principal + endpoint' : String(value);
    return String(value);
  }
  switch (field) {
    case 'retryWindowSeconds':
    case 'retentionSeconds':
      return durationWords(value);
    case 'leaseMs':
    case 'lockTimeoutMs':
      return durationWords(value / 1000);
    case 'maxResponseBytes':
      return bytesWords(value);
    default:
      return value.toLocaleString('en');
  }
}

/** The fields that differ between two versions, in the form's order, with old and new in words. */
export function policyChanges(previous: Record<string, unknown> | null, current: Record<string, unknown>): { field: PolicyFieldName; label: string; from: string; to: string }[] {
  if (!previous) return [];
  return (Object.keys(policyFieldLabels) as PolicyFieldName[])
    .filter((field) => previous[field] !== current[field])
    .map((field) => ({ field, label: policyFieldLabels[field], from: policyValueWords(field, previous[field]), to: policyValueWords(field, current[field]) }));
}

/** Every field of a policy in words, in the form's order: "Scope principal + endpoint; Retry window 24 h; ...". */
export function policyWords(fields: Record<string, unknown>): string {
  return (Object.keys(policyFieldLabels) as PolicyFieldName[])
    .filter((field) => fields[field] !== undefined)
    .map((field) => `${policyFieldLabels[field]} ${policyValueWords(field, fields[field])}`)
    .join('; ');
}

/** A history entry's change as the review page says it: "created", "retention 26 h → 48 h, lease 30 s → 1 min", or "no field changed". */
export function changeWords(previous: Record<string, unknown> | null, current: Record<string, unknown>): string {
  if (!previous) return 'created';
  const changes = policyChanges(previous, current).map((change) => `${change.label.toLowerCase()} ${change.from} → ${change.to}`);
  return changes.length > 0 ? changes.join(', ') : 'no field changed';
}
