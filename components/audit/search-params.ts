// The audit log's URL state (actor, action, from, to) as plain values, links and API URLs,
// for the client bundle (no zod here: its eval probe would trip the page's CSP). Times travel
// as ISO 8601 with the operator's own UTC offset; the inputs show them in local time.
import { auditActions } from '@/server/audit/actions';

export interface AuditSearch {
  actor?: string | undefined;
  action?: string | undefined;
  /** Inclusive lower bound, ISO 8601 with an offset. */
  from?: string | undefined;
  /** Exclusive upper bound, ISO 8601 with an offset. */
  to?: string | undefined;
  /** "hide": sign-ins and sign-outs left out. */
  signIns?: 'hide' | undefined;
}

/** Entries per page in the table (the API allows up to 500). */
export const AUDIT_PAGE_SIZE = 50;

/**
 * What the action filter suggests: each family's prefix ("policy.") and every action the
 * product writes (server/audit/actions.ts). A whole action matches exactly, anything else as
 * the start of an action.
 */
export const knownActions = [...new Set(auditActions.map((action) => action.slice(0, action.indexOf('.') + 1))), ...auditActions];

function filterParams(search: AuditSearch): URLSearchParams {
  const params = new URLSearchParams();
  for (const name of ['actor', 'action', 'from', 'to', 'signIns'] as const) {
    const value = search[name];
    if (value) params.set(name, value);
  }
  return params;
}

export function hasFilters(search: AuditSearch): boolean {
  return filterParams(search).size > 0;
}

export function auditHref(search: AuditSearch): string {
  const query = filterParams(search).toString();
  return query ? `/audit?${query}` : '/audit';
}

export function auditApiUrl(search: AuditSearch, after: string | null): string {
  const params = filterParams(search);
  params.set('limit', String(AUDIT_PAGE_SIZE));
  if (after) params.set('after', after);
  return `/api/admin/audit?${params.toString()}`;
}

/** The CSV export of the same filters (the API caps it at 10,000 rows and audits it). */
export function auditCsvUrl(search: AuditSearch): string {
  const params = filterParams(search);
  params.set('format', 'csv');
  return `/api/admin/audit?${params.toString()}`;
}

const pad = (value: number) => String(Math.abs(value)).padStart(2, '0');

/** A datetime-local value ("2025-05-01T10:30", read in the browser's time zone) as ISO 8601 with that offset; undefined when empty or invalid. */
export function localInputToIso(value: string): string | undefined {
  if (!value) return undefined;
  const date = new Date(value);
  if (Number.isNaN(date.getTime())) return undefined;
  const offset = -date.getTimezoneOffset();
  const zone = `${offset >= 0 ? '+' : '-'}${pad(Math.trunc(offset / 60))}:${pad(offset % 60)}`;
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}${zone}`;
}

/** An ISO time as a datetime-local value in the browser's time zone (seconds only when not zero). */
export function isoToLocalInput(iso: string | undefined): string {
  if (!iso) return '';
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return '';
  const minutes = `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}`;
  return date.getSeconds() === 0 ? minutes : `${minutes}:${pad(date.getSeconds())}`;
}
