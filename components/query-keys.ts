// The one query-key factory: the server page prefetches and the client component refreshes
// under the same keys, so hydration hands over without a second fetch.
import type { AuditSearch } from './audit/search-params';

/** Stale claims the claims page shows (its prefetch and its refresh must ask for the same). */
export const STALE_CLAIMS_SHOWN = 200;

export const queryKeys = {
  /** `from`/`to`: an absolute window (null: the range, ending now). */
  overview: (search: { range: string; service?: string | undefined; scope?: string | undefined; from?: string | undefined; to?: string | undefined; compare?: string | undefined }) =>
    ['overview', { range: search.range, service: search.service ?? null, scope: search.scope ?? null, from: search.from ?? null, to: search.to ?? null, compare: search.compare ?? null }] as const,
  /** `staleClaims()` (no argument) is the prefix of every service's list, for invalidation. */
  staleClaims: (service?: string | null) => (service === undefined ? (['stale-claims'] as const) : (['stale-claims', { service }] as const)),
  /** `retention()` (no argument) is the prefix of every service's review, for invalidation. */
  retention: (service?: string | null) => (service === undefined ? (['retention'] as const) : (['retention', { service }] as const)),
  auditLog: (search: AuditSearch) => ['audit-log', { actor: search.actor ?? null, action: search.action ?? null, from: search.from ?? null, to: search.to ?? null, signIns: search.signIns ?? null }] as const,
  operators: () => ['operators'] as const,
};
