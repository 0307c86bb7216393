// The overview's URL state, defined once: each parameter's known values and its fallback
// (range, service, scope, refresh, an absolute window from/to, and compare), with the links built from it. Plain values for the client
// bundle (no zod there: its eval probe would trip the page's Content-Security-Policy).
export const ranges = ['1h', '6h', '24h', '7d', '30d'] as const;
export const refreshSettings = ['off', '10', '30', '60'] as const;
/** What the flow charts compare with: the same window a day or a week earlier. */
export const compareSettings = ['1d', '7d'] as const;
export const rangeSeconds: Record<(typeof ranges)[number], number> = { '1h': 3_600, '6h': 21_600, '24h': 86_400, '7d': 604_800, '30d': 2_592_000 };

export interface OverviewSearch {
  range: (typeof ranges)[number];
  service?: string | undefined;
  scope?: string | undefined;
  refresh: (typeof refreshSettings)[number];
  /** An absolute window (ISO 8601, both or neither): shown instead of the range, so a link reproduces it. */
  from?: string | undefined;
  to?: string | undefined;
  /** Draw the flow a day or a week earlier beside it (absent: no comparison). */
  compare?: (typeof compareSettings)[number] | undefined;
}

/** The longest window from/to may span: the longest range (as the API checks: overviewQuery). */
export const MAX_WINDOW_MS = rangeSeconds['30d'] * 1000;
// An ISO 8601 date-time with a zone (Z or +hh:mm), as z.iso.datetime({ offset: true }) accepts.
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

/** Why a from/to pair cannot be shown (naming the parameter), or null when it can. */
export function windowProblem(from: string | undefined, to: string | undefined): string | null {
  if (from === undefined && to === undefined) return null;
  if (from === undefined || to === undefined) return `The address has "${from === undefined ? 'to' : 'from'}" without "${from === undefined ? 'from' : 'to'}": give both, or a range alone.`;
  for (const [name, value] of [['from', from], ['to', to]] as const) {
    if (!ISO_TIME.test(value) || !Number.isFinite(Date.parse(value))) return `The address's "${name}" (${value.slice(0, 40)}) is not an ISO 8601 time with a zone, such as 2026-12-06T01:00:00Z.`;
  }
  const span = Date.parse(to) - Date.parse(from);
  if (span <= 0) return `The address's "to" (${to.slice(0, 40)}) is not after its "from" (${from.slice(0, 40)}).`;
  if (span > MAX_WINDOW_MS) return `The address's window from "from" to "to" is longer than ${MAX_WINDOW_MS / 86_400_000} days, the longest the overview shows.`;
  return null;
}

/** The hour around a moment (an alert's start): half an hour either side, whole minutes. */
export function windowAround(at: string): { from: string; to: string } {
  const minute = Math.floor(Date.parse(at) / 60_000) * 60_000;
  return { from: new Date(minute - 30 * 60_000).toISOString(), to: new Date(minute + 30 * 60_000).toISOString() };
}

/** The names the URL may carry: services, and each service's scopes (from policies and recorded flow). */
export interface KnownNames {
  services: string[];
  scopes: { service: string; scope: string }[];
}

/** Each parameter: its default, and whether a given value is one the overview knows. */
export const overviewParams = {
  range: { fallback: '1h', what: 'time range', known: (value: string): value is OverviewSearch['range'] => (ranges as readonly string[]).includes(value) },
  compare: { what: 'comparison', known: (value: string): value is (typeof compareSettings)[number] => (compareSettings as readonly string[]).includes(value) },
  refresh: { fallback: '30', what: 'auto-refresh setting', known: (value: string): value is OverviewSearch['refresh'] => (refreshSettings as readonly string[]).includes(value) },
  service: { what: 'service', known: (value: string, names: KnownNames) => names.services.includes(value) },
  scope: {
    what: 'scope',
    known: (value: string, names: KnownNames, service: string | undefined) => names.scopes.some((known) => known.scope === value && (service === undefined || known.service === service)),
  },
} as const;

export interface CorrectedSearch {
  search: OverviewSearch;
  /** One sentence per value the URL had that the overview does not know (empty: the URL was right). */
  notices: string[];
}

/**
 * The URL's values checked against the known ones: an unknown value is dropped (range and
 * refresh fall back to their defaults) and said so, so the page never shows one thing under
 * a URL that names another.
 */
export function correctOverviewSearch(
  raw: { range?: string | undefined; service?: string | undefined; scope?: string | undefined; refresh?: string | undefined; from?: string | undefined; to?: string | undefined; compare?: string | undefined },
  names: KnownNames,
): CorrectedSearch {
  const notices: string[] = [];
  const unknown = (what: string, value: string, instead: string) => notices.push(`There is no ${what} "${value.slice(0, 80)}": showing ${instead}.`);
  let range: OverviewSearch['range'] = overviewParams.range.fallback;
  if (raw.range !== undefined) {
    if (overviewParams.range.known(raw.range)) range = raw.range;
    else unknown(overviewParams.range.what, raw.range, 'the last hour');
  }
  let refresh: OverviewSearch['refresh'] = overviewParams.refresh.fallback;
  if (raw.refresh !== undefined) {
    if (overviewParams.refresh.known(raw.refresh)) refresh = raw.refresh;
    else unknown(overviewParams.refresh.what, raw.refresh, 'every 30 s');
  }
  let compare: OverviewSearch['compare'];
  if (raw.compare !== undefined && raw.compare !== '') {
    if (overviewParams.compare.known(raw.compare)) compare = raw.compare;
    else unknown(overviewParams.compare.what, raw.compare, 'no comparison');
  }
  let service: string | undefined;
  if (raw.service !== undefined && raw.service !== '') {
    if (overviewParams.service.known(raw.service, names)) service = raw.service;
    else unknown(overviewParams.service.what, raw.service, 'all services');
  }
  let scope: string | undefined;
  if (raw.scope !== undefined && raw.scope !== '') {
    if (overviewParams.scope.known(raw.scope, names, service)) scope = raw.scope;
    else unknown(overviewParams.scope.what, raw.scope, service ? `all scopes of ${service}` : 'all scopes');
  }
  const problem = windowProblem(raw.from, raw.to);
  if (problem !== null) notices.push(`${problem} Showing ${range === '1h' ? 'the last hour' : `the range ${range}`} instead.`);
  const window = problem === null && raw.from !== undefined && raw.to !== undefined ? { from: raw.from, to: raw.to } : {};
  return { search: { range, service, scope, refresh, ...window, ...(compare ? { compare } : {}) }, notices };
}

export function overviewHref(search: OverviewSearch): string {
  const params = new URLSearchParams({ range: search.range, refresh: search.refresh });
  if (search.service) params.set('service', search.service);
  if (search.scope) params.set('scope', search.scope);
  if (search.from && search.to) {
    params.set('from', search.from);
    params.set('to', search.to);
  }
  if (search.compare) params.set('compare', search.compare);
  return `/?${params.toString()}`;
}

export function overviewApiUrl(search: Pick<OverviewSearch, 'range' | 'service' | 'scope' | 'from' | 'to' | 'compare'>): string {
  const params = new URLSearchParams({ range: search.range });
  if (search.service) params.set('service', search.service);
  if (search.scope) params.set('scope', search.scope);
  if (search.from && search.to) {
    params.set('from', search.from);
    params.set('to', search.to);
  }
  if (search.compare) params.set('compare', search.compare);
  return `/api/admin/overview?${params.toString()}`;
}
