// The overview's URL state, defined once: each parameter's known values and its fallback
// (range, service, scope, refresh), with the links built from it. Plain values for the client
// bundle (no zod there: its eval probe would trip the page's Content-Security-Policy).
export const ranges = ['1h', '6h', '24h', '7d', '30d'] as const;
export const refreshSettings = ['off', '10', '30', '60'] as const;
export const rangeSeconds: Record<(typeof ranges)[number], number> = { '1h': 3_600, '6h': 21_600, '24h': 86_400, '7d': 604_800, '30d': 2_592_000 };

export interface OverviewSearch {
  range: (typeof ranges)[number];
  service?: string | undefined;
  scope?: string | undefined;
  refresh: (typeof refreshSettings)[number];
}

/** The names the URL may carry: services, and each service's scopes (from policies and recorded flow). */
export interface KnownNames {
  services: string[];
  scopes: { service: string; scope: string }[];
}

/** Each parameter: its default, and whether a given value is one the overview knows. */
export const overviewParams = {
  range: { fallback: '1h', what: 'time range', known: (value: string): value is OverviewSearch['range'] => (ranges as readonly string[]).includes(value) },
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
export function correctOverviewSearch(raw: { range?: string | undefined; service?: string | undefined; scope?: string | undefined; refresh?: string | undefined }, names: KnownNames): CorrectedSearch {
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
  return { search: { range, service, scope, refresh }, notices };
}

export function overviewHref(search: OverviewSearch): string {
  const params = new URLSearchParams({ range: search.range, refresh: search.refresh });
  if (search.service) params.set('service', search.service);
  if (search.scope) params.set('scope', search.scope);
  return `/?${params.toString()}`;
}

export function overviewApiUrl(search: Pick<OverviewSearch, 'range' | 'service' | 'scope'>): string {
  const params = new URLSearchParams({ range: search.range });
  if (search.service) params.set('service', search.service);
  if (search.scope) params.set('scope', search.scope);
  return `/api/admin/overview?${params.toString()}`;
}
