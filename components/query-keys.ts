// The one query-key factory: the server page prefetches and the client component refreshes
// under the same keys, so hydration hands over without a second fetch.
export const queryKeys = {
  overview: (range: string, scope: string | null) => ['overview', { range, scope }] as const,
  staleClaims: () => ['stale-claims'] as const,
  retention: () => ['retention'] as const,
};
