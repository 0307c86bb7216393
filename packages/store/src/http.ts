// The HTTP semantics, once for every framework. An adapter turns its framework's request into a
// RequestView and writes the HttpAnswer back; everything the contract promises lives here:
// problem+json errors, Idempotent-Replayed, X-Correlation-Id (the original's on replay),
// Retry-After on 409 and 429, 413 over the body cap. Authentication and authorization run before
// any lookup on every request, so a replay is re-authorized.
import { isIdempotencyError } from './errors.js';
import { isDatabaseUnavailable, UNAVAILABLE_RETRY_AFTER_SECONDS } from './unavailable.js';
import type { EndpointPolicy, ExecutionMode } from './policy.js';
import type { Queryable } from './statements.js';
import type { IdempotencyStore, StoreOutcome, WorkContext, WorkResult } from './store.js';
import { validate, type Validator } from './validator.js';
import { newCorrelationId } from './correlation-id.js';
import { canonicalBody } from './fingerprint.js';

export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

export interface Problem {
  status: number;
  /** Short machine-readable slug; the problem type is urn:retrysafe:problem:<slug>. */
  slug: string;
  title: string;
  detail?: string;
  errors?: { path: string; message: string }[];
  headers?: Record<string, string>;
}

/** What an adapter writes back: status, headers and the exact bytes. */
export interface HttpAnswer {
  status: number;
  headers: Record<string, string>;
  body: Uint8Array;
}

export function problemAnswer(problem: Problem, correlationId: string): HttpAnswer {
  const body = {
    type: `urn:retrysafe:problem:${problem.slug}`,
    title: problem.title,
    status: problem.status,
    ...(problem.detail === undefined ? {} : { detail: problem.detail }),
    ...(problem.errors === undefined ? {} : { errors: problem.errors }),
    correlationId,
  };
  return {
    status: problem.status,
    headers: { 'Content-Type': PROBLEM_CONTENT_TYPE, 'Cache-Control': 'no-store', 'X-Correlation-Id': correlationId, ...problem.headers },
    body: new TextEncoder().encode(JSON.stringify(body)),
  };
}

/** A Fetch API Response from an answer. */
export function toResponse(answer: HttpAnswer): Response {
  // Node's Buffers (and so these bytes) sit on a plain ArrayBuffer, never a SharedArrayBuffer.
  const body = answer.body as Uint8Array<ArrayBuffer>;
  return new Response(body.byteLength === 0 ? null : body, { status: answer.status, headers: answer.headers });
}

export function problemResponse(problem: Problem, correlationId: string): Response {
  return toResponse(problemAnswer(problem, correlationId));
}

/**
 * The problem for an error the store or this layer raised, told by its `code` (so it works
 * across two copies of this package), or for a database that cannot be reached or timed out
 * (503 with Retry-After: nothing was decided, a retry is safe); null for anything else, which
 * is a bare 500.
 */
export function problemFor(error: unknown): Problem | null {
  if (isDatabaseUnavailable(error)) {
    return {
      status: 503,
      slug: 'database-unavailable',
      title: 'The database is unavailable',
      detail: 'Retrying with the same Idempotency-Key is safe after the time in Retry-After',
      headers: { 'Retry-After': String(UNAVAILABLE_RETRY_AFTER_SECONDS) },
    };
  }
  if (!isIdempotencyError(error) && !isRequestError(error)) return null;
  switch (error.code) {
    case 'KEY_IN_USE':
      return {
        status: 409,
        slug: 'key-in-use',
        title: 'A request with this Idempotency-Key is still in progress',
        detail: 'Retry after the time in Retry-After',
        headers: { 'Retry-After': String(retryAfterOf(error)) },
      };
    case 'FINGERPRINT_MISMATCH':
      return { status: 422, slug: 'key-reused', title: 'This Idempotency-Key was already used with a different request' };
    case 'KEY_QUOTA_EXCEEDED':
      return { status: 429, slug: 'key-quota-exceeded', title: 'Too many live idempotency keys', headers: { 'Retry-After': String(retryAfterOf(error)) } };
    case 'INVALID_KEY_IDENTITY':
      return { status: 400, slug: 'invalid-key-identity', title: 'The idempotency key cannot be stored', detail: error.message };
    case 'UNCANONICAL_REQUEST':
      return { status: 400, slug: 'invalid-json', title: 'The request body cannot be canonicalised', detail: error.message };
    case 'BODY_TOO_LARGE':
    case 'INVALID_JSON':
      return requestBodyProblem(error);
    case 'RESPONSE_NOT_STORABLE':
    case 'STORED_RESPONSE_UNREADABLE':
      return null;
  }
}

function retryAfterOf(error: object): number {
  const seconds: unknown = 'retryAfterSeconds' in error ? error.retryAfterSeconds : undefined;
  return typeof seconds === 'number' && Number.isFinite(seconds) ? Math.max(1, Math.ceil(seconds)) : 1;
}

/** The problem of a body refused while reading it: over the cap (413) or not JSON (400). */
export function requestBodyProblem(error: RequestBodyError): Problem {
  return error.code === 'BODY_TOO_LARGE'
    ? { status: 413, slug: 'body-too-large', title: 'Request body too large', detail: error.message }
    : { status: 400, slug: 'invalid-json', title: 'The request body is not valid JSON' };
}

/** Errors of the request itself, raised while reading it. */
export class RequestBodyError extends Error {
  constructor(
    readonly code: 'BODY_TOO_LARGE' | 'INVALID_JSON',
    message: string,
  ) {
    super(message);
    this.name = 'RequestBodyError';
  }
}

function isRequestError(error: unknown): error is RequestBodyError {
  if (!(error instanceof Error)) return false;
  const code: unknown = (error as { code?: unknown }).code;
  return error.name === 'RequestBodyError' && (code === 'BODY_TOO_LARGE' || code === 'INVALID_JSON');
}

/** An idempotency key as the contract allows it: 1 to 255 visible ASCII characters. */
export const KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;

/**
 * The Idempotency-Key header: 1 to 255 characters, each 0x21..0x7E. A structured-field
 * string ("...", RFC 8941 escapes \" and \\) is accepted and unquoted; the result must
 * still be a valid key.
 */
export function parseIdempotencyKey(header: string | null | undefined): { ok: true; key: string } | { ok: false; detail: string } {
  if (header === null || header === undefined || header === '') return { ok: false, detail: 'The Idempotency-Key header is required' };
  let key = header;
  if (header.length >= 2 && header.startsWith('"') && header.endsWith('"')) {
    let unquoted = '';
    for (let i = 1; i < header.length - 1; i += 1) {
      const char = header.charAt(i);
      if (char === '\\') {
        const next = header.charAt(i + 1);
        if ((next !== '"' && next !== '\\') || i + 1 >= header.length - 1) {
          return { ok: false, detail: 'The quoted Idempotency-Key has an invalid escape' };
        }
        unquoted += next;
        i += 1;
      } else if (char === '"') {
        return { ok: false, detail: 'The quoted Idempotency-Key has an unescaped quote' };
      } else {
        unquoted += char;
      }
    }
    key = unquoted;
  }
  if (!KEY_PATTERN.test(key)) {
    return { ok: false, detail: 'The Idempotency-Key must be 1 to 255 characters, each between 0x21 and 0x7E' };
  }
  return { ok: true, key };
}

/** Reads at most maxBytes from a byte stream, refusing as soon as it is over. */
export async function readLimited(chunks: AsyncIterable<Uint8Array>, maxBytes: number): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  let total = 0;
  for await (const chunk of chunks) {
    total += chunk.byteLength;
    if (total > maxBytes) throw tooLarge(maxBytes);
    parts.push(chunk);
  }
  const out = new Uint8Array(total);
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.byteLength;
  }
  return out;
}

/** Reads at most maxBytes of a Fetch API body stream (cancelling it when over). */
export function readWebStream(stream: ReadableStream<Uint8Array>, maxBytes: number): Promise<Uint8Array> {
  const reader = stream.getReader();
  return readLimited(
    (async function* () {
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) return;
          yield value;
        }
      } finally {
        await reader.cancel().catch(() => undefined);
      }
    })(),
    maxBytes,
  );
}

export function tooLarge(maxBytes: number): RequestBodyError {
  return new RequestBodyError('BODY_TOO_LARGE', `The limit is ${maxBytes} bytes`);
}

/** The request body as the adapter has it. */
export type RequestBody =
  /** Not read yet: the layer reads at most the route's cap and parses it as JSON. */
  | { kind: 'stream'; read: (maxBytes: number) => Promise<Uint8Array> }
  /**
   * Already parsed by the framework (express.json(), Fastify). `bytes` is the size of the body the
   * parser read, decoded (after any Content-Encoding), when the adapter knows it; never a
   * compressed Content-Length. null when it cannot know (a compressed or chunked body): the cap
   * then applies to the body's canonical JSON, the form the fingerprint hashes.
   */
  | { kind: 'parsed'; value: unknown; bytes: number | null };

/** A framework's request as this layer sees it. */
export interface RequestView<Native> {
  native: Native;
  header: (name: string) => string | null | undefined;
  body: RequestBody;
}

/** Who is calling. An adopter's principal may carry more (roles, a tenant name). */
export interface Principal {
  principalId: string;
}

export interface IdempotentRoute<Input, P extends Principal, Native, Db = Queryable> {
  /** The operation's name and the scope of endpoint-scoped keys, e.g. "POST /orders". */
  endpoint: string;
  /** The HTTP method, part of the fingerprint. */
  method: string;
  mode: ExecutionMode;
  /**
   * The policy in force, read on every request. Absent: the store's policy for this service and
   * endpoint (createRetrysafe's `policies`, kept current from the database, where compliance
   * reviews and edits it); a route without either is refused when it is created. Given: it is
   * registered once, in the background, when the route is created (or on its first request): the
   * endpoint's policy row is created from it when none exists (with its first history entry), so the retention review
   * lists the endpoint and the key lookup finds its keys. An existing row is the published promise
   * and is never overwritten; the route still runs on this policy, and the review shows where a
   * static policy's values differ from the row (routePolicyRegistered says when it is done).
   */
  policy?: EndpointPolicy | (() => EndpointPolicy);
  /** Largest request body accepted (413 beyond). */
  maxBodyBytes: number;
  /** The whole request in, the principal out (null: 401). Runs on every request, replays included. */
  authenticate: (request: Native) => Promise<P | null> | P | null;
  /** May this principal call the endpoint? (false: 403). Checked on every request, replays included. */
  authorize?: (principal: P, request: Native) => Promise<boolean> | boolean;
  /** The body's schema: a Standard Schema (zod, valibot, arktype...) or a { safeParse } object. */
  input: Validator<Input>;
  /** The operation. transactional: use context.db for the effects that must commit with the key. */
  work: (input: Input, principal: P, context: WorkContext<Db>, request: Native) => Promise<WorkResult>;
  /** Rebuilds a response that was stored as a reference (over the size cap). */
  rederive?: (reference: string, db: Db) => Promise<Buffer>;
  /** Told about unexpected errors (answered as a bare 500), and a failed registration of `policy` (retried by a later request); must not log request bodies. */
  onError?: (error: unknown, correlationId: string) => void;
}

function outcomeAnswer(outcome: StoreOutcome): HttpAnswer {
  const headers: Record<string, string> = {
    'Content-Type': outcome.contentType,
    'Cache-Control': 'no-store',
    'X-Correlation-Id': outcome.correlationId,
  };
  if (outcome.replayed) headers['Idempotent-Replayed'] = 'true';
  return { status: outcome.status, headers, body: new Uint8Array(outcome.body.buffer, outcome.body.byteOffset, outcome.body.byteLength) };
}

function parseJson(bytes: Uint8Array): unknown {
  try {
    return JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch {
    throw new RequestBodyError('INVALID_JSON', 'The request body is not valid JSON');
  }
}

/** The body's JSON value, checked against the cap; its canonical JSON when measuring needed it (the store then fingerprints that string). */
async function bodyOf(body: RequestBody, maxBytes: number): Promise<{ value: unknown; canonical?: string }> {
  if (body.kind === 'stream') return { value: parseJson(await body.read(maxBytes)) };
  if (body.bytes !== null) {
    if (body.bytes > maxBytes) throw tooLarge(maxBytes);
    return { value: body.value };
  }
  // Parsed, its decoded size unknown: the cap applies to the canonical JSON the fingerprint
  // hashes, computed here once (an unencodable value is a 400, as it would be there).
  const canonical = canonicalBody(body.value);
  if (canonical.length > maxBytes || Buffer.byteLength(canonical, 'utf8') > maxBytes) throw tooLarge(maxBytes);
  return { value: body.value, canonical };
}

function routePolicy(store: IdempotencyStore<unknown>, route: Pick<IdempotentRoute<unknown, Principal, unknown>, 'policy' | 'endpoint'>): EndpointPolicy {
  if (typeof route.policy === 'function') return route.policy();
  return route.policy ?? store.policyFor(route.endpoint);
}

/** The parts of a route that say which policy it runs on and where its registration's failures go. */
export type RoutePolicySource = Pick<IdempotentRoute<unknown, Principal, unknown>, 'policy' | 'endpoint' | 'onError'> & { mode?: ExecutionMode };

/** A route's registration of its own policy: started once, retried by a later request after a failure. */
interface Registration {
  state: 'pending' | 'done' | 'failed';
  failedAt: number;
  settled: Promise<boolean>;
}

/** By route object (an adapter hands the same one to every request); no entry: not started yet. */
const registrations = new WeakMap<object, Registration>();

/** How long after a failed registration a request may start the next attempt. */
const REGISTRATION_RETRY_MS = 10_000;

/**
 * Registers the route's own policy, in the background, once (store.registerRoutePolicy): the
 * endpoint's policy row is created when none exists, so the retention review lists it and the key
 * lookup finds its keys; a static policy's values are recorded for the review's comparison with
 * the published row (a function's are whatever it returns, often the database's own). Failures go
 * to the route's onError; a request after REGISTRATION_RETRY_MS tries again. A request never waits
 * for it, and once it is done costs one WeakMap lookup.
 */
function registerOwnPolicy(store: IdempotencyStore<unknown>, route: RoutePolicySource): void {
  const own = route.policy;
  if (own === undefined) return;
  const previous = registrations.get(route);
  if (previous && (previous.state !== 'failed' || Date.now() - previous.failedAt < REGISTRATION_RETRY_MS)) return;
  const registration: Registration = previous ?? { state: 'pending', failedAt: 0, settled: Promise.resolve(false) };
  registration.state = 'pending';
  registrations.set(route, registration);
  // Off the caller's turn: route creation stays synchronous and a function policy is not called in it.
  registration.settled = Promise.resolve()
    .then(() => store.registerRoutePolicy(route.endpoint, typeof own === 'function' ? own() : own, typeof own !== 'function'))
    .then(
      (registered) => {
        registration.state = 'done';
        return registered;
      },
      (error: unknown) => {
        registration.state = 'failed';
        registration.failedAt = Date.now();
        route.onError?.(error, newCorrelationId());
        return false;
      },
    );
}

/**
 * Settles when the route's own policy registration has (true: registered; false: it failed, was
 * not started, or the route has no policy of its own). For readiness checks and tests.
 */
export function routePolicyRegistered(route: object): Promise<boolean> {
  return registrations.get(route)?.settled ?? Promise.resolve(false);
}

/**
 * Checks at start-up (an adapter calls it when the route is created) that the route has a
 * policy: its own, or the store's for this service and endpoint. Throws PolicyNotFoundError naming
 * both. A policy of its own is registered (registerOwnPolicy), in the background.
 */
export function checkRoutePolicy(store: IdempotencyStore<unknown>, route: RoutePolicySource): void {
  // A transactional route on a claim-first-only backend (Redis) is refused where it is created.
  if (route.mode !== undefined) store.checkMode(route.mode);
  if (route.policy === undefined) store.policyFor(route.endpoint);
  else registerOwnPolicy(store, route);
}

/** Answers one request to an endpoint behind the store. */
export async function answerIdempotent<Input, P extends Principal, Native, Db = Queryable>(
  store: IdempotencyStore<Db>,
  route: IdempotentRoute<Input, P, Native, Db>,
  request: RequestView<Native>,
): Promise<HttpAnswer> {
  const correlationId = newCorrelationId();
  const fail = (problem: Problem) => problemAnswer(problem, correlationId);
  // A route created without checkRoutePolicy (Next's lazily resolved store), or whose registration failed.
  if (route.policy !== undefined && registrations.get(route)?.state !== 'done') registerOwnPolicy(store, route);
  try {
    const principal = await route.authenticate(request.native);
    if (!principal) {
      return fail({ status: 401, slug: 'unauthenticated', title: 'Missing or invalid credentials', headers: { 'WWW-Authenticate': 'Bearer' } });
    }
    if (route.authorize && !(await route.authorize(principal, request.native))) {
      return fail({ status: 403, slug: 'forbidden', title: `This principal may not call ${route.endpoint}` });
    }
    const key = parseIdempotencyKey(request.header('idempotency-key'));
    if (!key.ok) return fail({ status: 400, slug: 'invalid-idempotency-key', title: 'Invalid Idempotency-Key', detail: key.detail });

    const { value: json, canonical } = await bodyOf(request.body, route.maxBodyBytes);
    const parsed = await validate(route.input, json);
    if (!parsed.ok) {
      return fail({ status: 400, slug: 'invalid-body', title: 'The request body is invalid', errors: parsed.issues });
    }
    const input = parsed.value;
    const outcome = await store.execute({
      principalId: principal.principalId,
      endpoint: route.endpoint,
      method: route.method.toUpperCase(),
      key: key.key,
      body: json,
      ...(canonical === undefined ? {} : { canonicalBody: canonical }),
      policy: routePolicy(store, route),
      mode: route.mode,
      correlationId,
      work: (context) => route.work(input, principal, context, request.native),
      rederive: route.rederive,
    });
    return outcomeAnswer(outcome);
  } catch (error) {
    const problem = problemFor(error);
    if (problem) return fail(problem);
    route.onError?.(error, correlationId);
    return fail({ status: 500, slug: 'internal', title: 'Internal error', detail: 'Retrying with the same Idempotency-Key is safe' });
  }
}

/** A JSON work result: the body as UTF-8 JSON text. */
export function jsonResult(status: number, value: unknown): WorkResult {
  return { status, contentType: 'application/json', body: Buffer.from(JSON.stringify(value), 'utf8') };
}
