/**
 * Next.js App Router: a route handler (Node.js runtime).
 *
 * @module @retrysafe/store/next
 */
// Next.js App Router route handlers. The handler takes the Request Next gives a route handler
// (a NextRequest is one) and Next's second argument, and answers a Response:
//
//   // app/api/orders/route.ts
//   export const POST = idempotentRoute(retrysafe.store, { endpoint: 'POST /api/orders', method: 'POST', ... });
//
// Route handlers run on the Node.js runtime (the default); the store needs node:crypto and pg.
import type { IdempotencyStore } from '../store.js';
import type { Queryable } from '../statements.js';
import { answerIdempotent, checkRoutePolicy, toResponse, type IdempotentRoute, type Principal } from '../http.js';
import { viewOfRequest } from './fetch.js';

export type NextRoute<Input, P extends Principal, R extends Request = Request, Db = Queryable> = IdempotentRoute<Input, P, R, Db>;

export function idempotentRoute<Input, P extends Principal, R extends Request = Request, Db = Queryable>(
  store: IdempotencyStore<Db> | (() => IdempotencyStore<Db> | Promise<IdempotencyStore<Db>>),
  route: NextRoute<Input, P, R, Db>,
): (request: R, context?: unknown) => Promise<Response> {
  if (typeof store !== 'function') checkRoutePolicy(store, route);
  return async (request) => {
    const resolved = typeof store === 'function' ? await store() : store;
    return toResponse(await answerIdempotent(resolved, route, viewOfRequest(request, request)));
  };
}

export { jsonResult, problemFor, problemResponse, type Principal, type Problem } from '../http.js';
