// The bridge from dashboard pages and admin routes to server/auth: the dashboard's own pools
// (its restricted database role on the primary, and on a hot standby for reads when
// DASHBOARD_READ_URL is set: server/dashboard-pools.ts), the key records read through the store's
// KeyRecordReads, the operator auth, and the role checks every page, route handler and server
// action makes on the server.
import 'server-only';
import { randomUUID } from 'node:crypto';
import { headers } from 'next/headers';
import { forbidden, redirect } from 'next/navigation';
import type pg from 'pg';
import { readOperatorSession, type OperatorAuth, type SessionOperator } from '@/server/auth/operator-auth';
import { roleIncludes } from '@/server/auth/roles';
import type { DashboardPools } from '@/server/dashboard-pools';
import type { Dashboard } from '@/server/runtime';
import { problemResponse } from '@retrysafe/store';
import type { KeyAccess } from '@/server/idempotency/key-metadata';
import { requiredRole, type OperatorRoute } from './access';
import { misdirected } from './host';
import { serverRuntime } from './runtime';

/** The dashboard's side of this process's runtime (server/runtime.ts), made on first use and closed by its stop(). */
function dashboard(): Dashboard {
  return serverRuntime().dashboard();
}

/**
 * The dashboard's pool on the primary: everything that writes (audit rows, policy edits,
 * operator changes, sign-in, audited exports). Its role cannot read response bodies or write the store.
 */
export function dashboardPool(): pg.Pool {
  return dashboard().pools.pool;
}

/** The dashboard's pool for reads that write nothing: the standby's (DASHBOARD_READ_URL), else dashboardPool(). */
export function dashboardReadPool(): pg.Pool {
  return dashboard().pools.readPool;
}

/** The standby's lag behind the primary for the overview (readReplicaLag); undefined when the dashboard reads the primary. */
export function dashboardReplicaLag(): DashboardPools['replicaLag'] {
  return dashboard().pools.replicaLag;
}

/**
 * Key records (lookups, a principal's keys, correlation ids, stale claims) read on the standby
 * when there is one, and the audit log they are recorded in (and releases) on the primary.
 */
export function dashboardKeys(): KeyAccess {
  return dashboard().pools.keys;
}

/** Sign-in's pool (AUTH_ROLE): credentials and sessions, nothing else. */
export function authPool(): pg.Pool {
  return dashboard().authPool;
}

export function operatorAuth(): OperatorAuth {
  return dashboard().auth;
}

export async function currentOperator(): Promise<SessionOperator | null> {
  return readOperatorSession(operatorAuth(), await headers());
}

/** For pages and server actions: the signed-in operator with the route's role, else /login or 403. */
export async function requirePageOperator(path: OperatorRoute): Promise<SessionOperator> {
  const operator = await currentOperator();
  if (!operator) redirect(`/login?next=${encodeURIComponent(path)}`);
  if (!roleIncludes(operator.role, requiredRole(path))) forbidden();
  return operator;
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * For route handlers: the operator, or the problem response to return (401 without a
 * session, 403 below the route's role, 403 for a mutation from another origin: CSRF, and 403
 * for any request a browser says another site made, GETs included: some GETs are audited
 * exports, and a page elsewhere must not be able to make an operator's browser write audit rows).
 */
export async function authorizeRoute(request: Request, path: OperatorRoute): Promise<SessionOperator | Response> {
  const correlationId = randomUUID();
  const refused = misdirected(request.headers);
  if (refused) return refused;
  if ((!SAFE_METHODS.has(request.method) && !sameOrigin(request)) || fromAnotherSite(request)) {
    return problemResponse({ status: 403, slug: 'cross-origin', title: 'Cross-origin request refused' }, correlationId);
  }
  const operator = await readOperatorSession(operatorAuth(), request.headers);
  if (!operator) return problemResponse({ status: 401, slug: 'unauthenticated', title: 'Sign in first' }, correlationId);
  if (!roleIncludes(operator.role, requiredRole(path))) {
    return problemResponse({ status: 403, slug: 'forbidden', title: `This needs the ${requiredRole(path)} role` }, correlationId);
  }
  return operator;
}

/**
 * A mutation must come from a page of this dashboard: Origin (or Referer) is PUBLIC_URL's, or
 * matches the Host the request was sent to. Never X-Forwarded-Host: any client can send it, so
 * it would let a foreign Origin name itself.
 */
export function sameOrigin(request: Request): boolean {
  const source = request.headers.get('origin') ?? request.headers.get('referer');
  if (!source || !URL.canParse(source)) return false;
  const origin = new URL(source);
  return origin.host === request.headers.get('host') || origin.origin === new URL(dashboard().publicUrl).origin;
}

/** Fetch Metadata: the browser says another site (or a sibling subdomain) made this request. */
function fromAnotherSite(request: Request): boolean {
  const site = request.headers.get('sec-fetch-site');
  return site === 'cross-site' || site === 'same-site';
}
