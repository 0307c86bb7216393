// The one query-key factory: the server page prefetches and the client component refreshes
// under the same keys, so hydration hands over without a second fetch.
import type { AuditSearch } from './audit/search-params';

export const queryKeys = {
  overview: (range: string, scope: string | null) => ['overview', { range, scope }] as const,
  staleClaims: () => ['stale-claims'] as const,
  retention: () => ['retention'] as const,
  auditLog: (search: AuditSearch) => ['audit-log', { actor: search.actor ?? null, action: search.action ?? null, from: search.from ?? null, to: search.to ?? null }] as const,
  operators: () => ['operators'] as const,
};
