/**
 * Fastify: route options with the handler, the body limit and problem+json body refusals.
 *
 * @module @retrysafe/store/fastify
 */
// Fastify: route options with the handler, Fastify's body limit set to the route's cap, and an
// error handler that answers Fastify's own body refusals (too large, not JSON, empty) as
// problem+json:
//
//   app.post('/orders', idempotent(retrysafe.store, { endpoint: 'POST /orders', method: 'POST', ... }));
import type { FastifyReply, FastifyRequest, RouteShorthandOptionsWithHandler } from 'fastify';
import type { IdempotencyStore } from '../store.js';
import type { Queryable } from '../statements.js';
import { answerIdempotent, checkRoutePolicy, problemAnswer, RequestBodyError, requestBodyProblem, tooLarge, type HttpAnswer, type IdempotentRoute, type Principal, type RequestView } from '../http.js';
import { headerOf, unencodedLength } from './node-http.js';
import { newCorrelationId } from '../correlation-id.js';

export type FastifyRoute<Input, P extends Principal, Db = Queryable> = IdempotentRoute<Input, P, FastifyRequest, Db>;

function viewOf(request: FastifyRequest): RequestView<FastifyRequest> {
  return {
    native: request,
    header: (name) => headerOf(request.headers, name),
    // Fastify has parsed the body (JSON by default), within bodyLimit (its own parsers count the
    // bytes they read, after any preParsing decompression). Its decoded size is known here only
    // for an unencoded body; otherwise the layer measures the canonical JSON.
    body: { kind: 'parsed', value: request.body, bytes: unencodedLength(request.headers) },
  };
}

function send(reply: FastifyReply, answer: HttpAnswer): FastifyReply {
  return reply.code(answer.status).headers(answer.headers).send(Buffer.from(answer.body.buffer, answer.body.byteOffset, answer.body.byteLength));
}

function statusOf(error: unknown): number {
  const status = typeof error === 'object' && error !== null ? (error as { statusCode?: unknown }).statusCode : undefined;
  return typeof status === 'number' && status >= 400 && status < 500 ? status : 500;
}

export function idempotent<Input, P extends Principal, Db = Queryable>(store: IdempotencyStore<Db>, route: FastifyRoute<Input, P, Db>): RouteShorthandOptionsWithHandler {
  checkRoutePolicy(store, route);
  return {
    bodyLimit: route.maxBodyBytes,
    // Fastify awaits an async handler; it resolves to the reply it sent.
    handler: async (request, reply) => send(reply, await answerIdempotent(store, route, viewOf(request))),
    errorHandler: (error, _request, reply) => {
      const status = statusOf(error);
      const correlationId = newCorrelationId();
      if (status === 500) route.onError?.(error, correlationId);
      // Fastify's own refusals (body limit, not JSON, empty) are the layer's body problems.
      const problem =
        status === 415
          ? { status, slug: 'unsupported-media-type', title: 'The request body must be application/json' }
          : status === 500
            ? { status, slug: 'internal', title: 'Internal error', detail: 'Retrying with the same Idempotency-Key is safe' }
            : { ...requestBodyProblem(status === 413 ? tooLarge(route.maxBodyBytes) : new RequestBodyError('INVALID_JSON', 'The request body is not valid JSON')), status };
      send(reply, problemAnswer(problem, correlationId));
    },
  };
}

export { jsonResult, problemFor, type Principal, type Problem } from '../http.js';
