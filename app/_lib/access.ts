// Who may use each page and route, in one table. Pages and route handlers look their rule up
// here (so a route cannot be written without one), and a test walks app/ to check that every
// page and route file is listed and that its rule holds over HTTP.
import type { OperatorRole } from '@/server/auth/roles';

export type Access =
  | { kind: 'public' }
  /** The demo API: a tenant's API key (Authorization: Bearer). */
  | { kind: 'api-key' }
  /** Prometheus: METRICS_TOKEN when set. */
  | { kind: 'metrics-token' }
  /** An operator session with at least this role. */
  | { kind: 'operator'; role: OperatorRole };

const operator = <R extends OperatorRole>(role: R) => ({ kind: 'operator', role }) as const;

export const routeAccess = {
  '/': operator('viewer'),
  '/keys': operator('operator'),
  '/claims': operator('operator'),
  '/retention': operator('compliance'),
  '/audit': operator('compliance'),
  '/operators': operator('admin'),
  // The access review: who may sign in with which role, read-only.
  '/access-review': operator('compliance'),
  // Every signed-in operator: their own password.
  '/account': operator('viewer'),
  '/login': { kind: 'public' },
  // Sign-in over HTTP (same-origin, throttled like the form).
  '/api/auth/sign-in': { kind: 'public' },
  '/api/health': { kind: 'public' },
  // The HTTP layer's liveness, and the no-op baseline of `npm run bench -- http`: touches nothing.
  '/api/v1/ping': { kind: 'public' },
  '/api/metrics': { kind: 'metrics-token' },
  '/api/v1/payments': { kind: 'api-key' },
  '/api/v1/refunds': { kind: 'api-key' },
  '/api/admin/overview': operator('viewer'),
  '/api/admin/operators': operator('admin'),
  '/api/admin/access-review': operator('compliance'),
  '/api/admin/operators/[id]': operator('admin'),
  '/api/admin/operators/[id]/password': operator('admin'),
  '/api/account/password': operator('viewer'),
  '/api/admin/audit': operator('compliance'),
  '/api/admin/keys/lookup': operator('operator'),
  '/api/admin/keys/list': operator('operator'),
  '/api/admin/keys/correlation': operator('operator'),
  '/api/admin/keys/unrecorded': operator('operator'),
  '/api/admin/keys/reconcile': operator('operator'),
  '/api/admin/principals': operator('operator'),
  '/api/admin/retention': operator('compliance'),
  '/api/admin/retention/export': operator('compliance'),
  '/api/admin/policies': operator('admin'),
  '/api/admin/stale-claims': operator('operator'),
  '/api/admin/stale-claims/release': operator('operator'),
} as const satisfies Record<string, Access>;

export type RoutePath = keyof typeof routeAccess;
export type OperatorRoute = { [P in RoutePath]: (typeof routeAccess)[P] extends { kind: 'operator' } ? P : never }[RoutePath];

export function requiredRole(path: OperatorRoute): OperatorRole {
  return routeAccess[path].role;
}
