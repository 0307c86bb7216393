// The overview's URL state (range, service, scope, refresh) as plain values and links, for the client
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
