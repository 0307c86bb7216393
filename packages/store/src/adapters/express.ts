/**
 * Express (4 and 5): a request handler for an idempotent route, and problem+json for express.json()'s own refusals.
 *
 * @module @retrysafe/store/express
 */
// Express (4 and 5): a request handler. It works with or without express.json() before it;
// without, it reads the raw body itself, at most the route's cap. A body the JSON parser already
// read (and inflated, when gzip or deflate) is measured by its decoded size: exactly when the
// parser recorded it (`verify: recordBodyBytes`), or from Content-Length when the body was sent
// unencoded; a compressed or chunked body otherwise by its canonical JSON, the form the
// fingerprint hashes (whitespace the client sent is then not counted).
//
//   app.post('/orders', express.json({ verify: recordBodyBytes }), idempotent(retrysafe.store, { endpoint: 'POST /orders', method: 'POST', ... }));
//   app.use(problemErrors()); // optional: express.json()'s own 400/413 as problem+json too
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ErrorRequestHandler, Request, RequestHandler, Response } from 'express';
import type { IdempotencyStore } from '../store.js';
import type { Queryable } from '../statements.js';
import { answerIdempotent, checkRoutePolicy, problemAnswer, RequestBodyError, requestBodyProblem, type HttpAnswer, type IdempotentRoute, type Principal, type RequestView } from '../http.js';
import { headerOf, streamBody, unencodedLength } from './node-http.js';
import { newCorrelationId } from '../correlation-id.js';

export type ExpressRoute<Input, P extends Principal, Db = Queryable> = IdempotentRoute<Input, P, Request, Db>;

// Symbol.for, so two copies of this package read what either recorded.
const DECODED_BYTES = Symbol.for('retrysafe.decodedBodyBytes');

/**
 * body-parser's `verify` hook (express.json({ verify: recordBodyBytes })): records the size of
 * the decoded body it parsed, so the route's cap applies to exactly those bytes.
 */
export function recordBodyBytes(req: IncomingMessage, _res: ServerResponse, buffer: Buffer): void {
  (req as IncomingMessage & { [DECODED_BYTES]?: number })[DECODED_BYTES] = buffer.byteLength;
}

function parsedBytes(req: Request): number | null {
  const recorded = (req as Request & { [DECODED_BYTES]?: unknown })[DECODED_BYTES];
  return typeof recorded === 'number' ? recorded : unencodedLength(req.headers);
}

function viewOf(req: Request): RequestView<Request> {
  // A JSON parser has run when the body was consumed into req.body (body-parser 1.x also marks
  // it with _body); otherwise the stream is still unread and is read here.
  const parsed = (req as Request & { _body?: unknown })._body === true || (req.body !== undefined && req.readableEnded);
  return {
    native: req,
    header: (name) => headerOf(req.headers, name),
    body: parsed ? { kind: 'parsed', value: req.body as unknown, bytes: parsedBytes(req) } : streamBody(req),
  };
}

function send(res: Response, answer: HttpAnswer): void {
  res.status(answer.status);
  for (const [name, value] of Object.entries(answer.headers)) res.setHeader(name, value);
  res.end(Buffer.from(answer.body.buffer, answer.body.byteOffset, answer.body.byteLength));
}

export function idempotent<Input, P extends Principal, Db = Queryable>(store: IdempotencyStore<Db>, route: ExpressRoute<Input, P, Db>): RequestHandler {
  checkRoutePolicy(store, route);
  return (req, res, next) => {
    answerIdempotent(store, route, viewOf(req)).then((answer) => send(res, answer), next);
  };
}

/** Maps express.json()'s (body-parser's) refusals to problem+json; other errors pass on. */
export function problemErrors(): ErrorRequestHandler {
  return (error: unknown, _req, res, next) => {
    const type = typeof error === 'object' && error !== null ? (error as { type?: unknown }).type : undefined;
    const refusal =
      type === 'entity.too.large'
        ? new RequestBodyError('BODY_TOO_LARGE', 'Over the JSON parser limit')
        : type === 'entity.parse.failed' || type === 'encoding.unsupported' || type === 'charset.unsupported'
          ? new RequestBodyError('INVALID_JSON', 'The request body is not valid JSON')
          : null;
    if (refusal) send(res, problemAnswer(requestBodyProblem(refusal), newCorrelationId()));
    else next(error);
  };
}

export { jsonResult, problemFor, type Principal, type Problem } from '../http.js';
