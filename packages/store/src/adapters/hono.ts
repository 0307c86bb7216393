/**
 * Hono: a handler whose `authenticate` and `work` get Hono's Context.
 *
 * @module @retrysafe/store/hono
 */
// Hono: a handler (Hono's handlers and middleware share one shape) that answers the request.
// `authenticate` and `work` get Hono's Context, so c.get() values set by earlier middleware
// (your authentication, say) are at hand:
//
//   app.post('/orders', idempotent(retrysafe.store, { endpoint: 'POST /orders', method: 'POST', ... }));
import type { Context } from 'hono';
import type { IdempotencyStore } from '../store.js';
import type { Queryable } from '../statements.js';
import { answerIdempotent, checkRoutePolicy, readWebStream, RequestBodyError, toResponse, tooLarge, type IdempotentRoute, type Principal, type RequestBody, type RequestView } from '../http.js';

export type HonoRoute<Input, P extends Principal, C extends Context = Context, Db = Queryable> = IdempotentRoute<Input, P, C, Db>;

/** Of the bodies a Hono middleware can have cached, those that are the bytes it read (not a value parsed from them). */
const BYTES_CACHED = ['arrayBuffer', 'text', 'blob'] as const;

async function viewOfContext<C extends Context>(c: C): Promise<RequestView<C>> {
  const raw = c.req.raw;
  const cache = c.req.bodyCache;
  if (raw.bodyUsed && cache.json !== undefined && !BYTES_CACHED.some((kind) => cache[kind] !== undefined)) {
    // A middleware parsed it and only the value is cached (Hono re-serialises it for any other
    // reader): the bytes are gone, so the layer measures the value's canonical JSON.
    const value = await c.req.json().then(
      (parsed: unknown) => ({ parsed }),
      () => null,
    );
    const body: RequestBody = value
      ? { kind: 'parsed', value: value.parsed, bytes: null }
      : { kind: 'stream', read: () => Promise.reject(new RequestBodyError('INVALID_JSON', 'The request body is not valid JSON')) };
    return { native: c, header: (name) => c.req.header(name), body };
  }
  return {
    native: c,
    header: (name) => c.req.header(name),
    body: {
      kind: 'stream',
      read: async (maxBytes) => {
        const declared = Number(c.req.header('content-length') ?? NaN);
        if (Number.isFinite(declared) && declared > maxBytes) throw tooLarge(maxBytes);
        if (raw.bodyUsed) {
          // An earlier middleware read it (c.req.json() or text(): Hono caches the text): measure what it read.
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

export function idempotent<Input, P extends Principal, C extends Context = Context, Db = Queryable>(store: IdempotencyStore<Db>, route: HonoRoute<Input, P, C, Db>): (c: C) => Promise<Response> {
  checkRoutePolicy(store, route);
  return async (c) => toResponse(await answerIdempotent(store, route, await viewOfContext(c)));
}

export { jsonResult, problemFor, problemResponse, type Principal, type Problem } from '../http.js';
