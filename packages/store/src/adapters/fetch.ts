/**
 * Any Fetch-API runtime: a handler from Request to Response.
 *
 * @module @retrysafe/store/fetch
 */
// Any Fetch-API runtime (Node's own, Bun, Deno, Cloudflare-style workers with node:crypto and a
// reachable Postgres): a handler from Request to Response.
//
//   const handler = idempotent(retrysafe.store, { endpoint: 'POST /orders', method: 'POST', ... });
//   // handler(request: Request): Promise<Response>
import type { IdempotencyStore } from '../store.js';
import type { Queryable } from '../statements.js';
import { answerIdempotent, checkRoutePolicy, readWebStream, toResponse, tooLarge, type IdempotentRoute, type Principal, type RequestView } from '../http.js';

export type FetchRoute<Input, P extends Principal, Db = Queryable> = IdempotentRoute<Input, P, Request, Db>;

/** The RequestView of a Fetch Request: the body is read (at most the cap) by the layer. */
export function viewOfRequest<Native>(request: Request, native: Native): RequestView<Native> {
  return {
    native,
    header: (name) => request.headers.get(name),
    body: {
      kind: 'stream',
      read: async (maxBytes) => {
        const declared = Number(request.headers.get('content-length') ?? NaN);
        if (Number.isFinite(declared) && declared > maxBytes) throw tooLarge(maxBytes);
        return request.body ? readWebStream(request.body, maxBytes) : new Uint8Array(0);
      },
    },
  };
}

export function idempotent<Input, P extends Principal, Db = Queryable>(store: IdempotencyStore<Db>, route: FetchRoute<Input, P, Db>): (request: Request) => Promise<Response> {
  checkRoutePolicy(store, route);
  return async (request) => toResponse(await answerIdempotent(store, route, viewOfRequest(request, request)));
}

export { jsonResult, problemFor, problemResponse, type HttpAnswer, type Principal, type Problem } from '../http.js';
