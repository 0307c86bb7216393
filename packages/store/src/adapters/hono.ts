// Hono: a handler (Hono's handlers and middleware share one shape) that answers the request.
// `authenticate` and `work` get Hono's Context, so c.get() values set by earlier middleware
// (your authentication, say) are at hand:
//
//   app.post('/orders', idempotent(retrysafe.store, { endpoint: 'POST /orders', method: 'POST', ... }));
import type { Context } from 'hono';
import type { IdempotencyStore } from '../store.js';
import { answerIdempotent, checkRoutePolicy, readWebStream, toResponse, tooLarge, type IdempotentRoute, type Principal, type RequestView } from '../http.js';

export type HonoRoute<Input, P extends Principal, C extends Context = Context> = IdempotentRoute<Input, P, C>;

function viewOfContext<C extends Context>(c: C): RequestView<C> {
  const raw = c.req.raw;
  return {
    native: c,
    header: (name) => c.req.header(name),
    body: {
      kind: 'stream',
      read: async (maxBytes) => {
        const declared = Number(c.req.header('content-length') ?? NaN);
        if (Number.isFinite(declared) && declared > maxBytes) throw tooLarge(maxBytes);
        if (raw.bodyUsed) {
          // An earlier middleware read it (Hono caches the bytes): measure what it read.
          const bytes = new Uint8Array(await c.req.arrayBuffer());
          if (bytes.byteLength > maxBytes) throw tooLarge(maxBytes);
          return bytes;
        }
        if (!raw.body) return new Uint8Array(0);
        return readWebStream(raw.body, maxBytes);
      },
    },
  };
}

export function idempotent<Input, P extends Principal, C extends Context = Context>(store: IdempotencyStore, route: HonoRoute<Input, P, C>): (c: C) => Promise<Response> {
  checkRoutePolicy(store, route);
  return async (c) => toResponse(await answerIdempotent(store, route, viewOfContext(c)));
}

export { jsonResult, problemFor, problemResponse, type Principal, type Problem } from '../http.js';
