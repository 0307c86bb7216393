// The HTTP adapter over the Fetch API (Request -> Response), so Next route handlers and
// any Fetch-based server can put an endpoint behind the store. It owns the contract's
// statuses and headers: problem+json errors, Idempotent-Replayed, X-Correlation-Id (the
// original's on replay), Retry-After on 409 and 429. Authentication and authorization
// run before any lookup on every request, so a replay is re-authorized.
import { randomUUID } from 'node:crypto';
import type { z } from 'zod';
import {
  FingerprintMismatchError,
  InvalidKeyIdentityError,
  KeyInUseError,
  KeyQuotaExceededError,
  UncanonicalRequestError,
} from './errors';
import type { EndpointPolicy, ExecutionMode } from './policy';
import type { IdempotencyStore, StoreOutcome, WorkContext, WorkResult } from './store';
import type { Queryable } from './statements';

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

export function problemResponse(problem: Problem, correlationId: string): Response {
  const body = {
    type: `urn:retrysafe:problem:${problem.slug}`,
    title: problem.title,
    status: problem.status,
    ...(problem.detail === undefined ? {} : { detail: problem.detail }),
    ...(problem.errors === undefined ? {} : { errors: problem.errors }),
    correlationId,
  };
  return new Response(JSON.stringify(body), {
    status: problem.status,
    headers: { 'Content-Type': PROBLEM_CONTENT_TYPE, 'Cache-Control': 'no-store', 'X-Correlation-Id': correlationId, ...problem.headers },
  });
}

/** An idempotency key as the contract allows it: 1 to 255 visible ASCII characters. */
export const KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;

/**
 * The Idempotency-Key header: 1 to 255 characters, each 0x21..0x7E. A structured-field
 * string ("...", RFC 8941 escapes \" and \\) is accepted and unquoted; the result must
 * still be a valid key.
 */
export function parseIdempotencyKey(header: string | null): { ok: true; key: string } | { ok: false; detail: string } {
  if (header === null || header === '') return { ok: false, detail: 'The Idempotency-Key header is required' };
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

class BodyTooLargeError extends Error {
  readonly code = 'BODY_TOO_LARGE';
}

/** Reads at most maxBytes of the body, refusing early when Content-Length already says more. */
export async function readBodyLimited(request: Request, maxBytes: number): Promise<Buffer> {
  const declared = Number(request.headers.get('content-length') ?? NaN);
  if (Number.isFinite(declared) && declared > maxBytes) throw new BodyTooLargeError();
  if (!request.body) return Buffer.alloc(0);
  const chunks: Buffer[] = [];
  let total = 0;
  const reader = request.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) {
      await reader.cancel().catch(() => undefined);
      throw new BodyTooLargeError();
    }
    chunks.push(Buffer.from(value));
  }
  return Buffer.concat(chunks);
}

export interface Principal {
  principalId: string;
  permissions: readonly string[];
}

export interface IdempotentEndpoint<Input> {
  /** The operation, e.g. "POST /api/v1/payments"; the scope for endpoint-scoped keys. */
  endpoint: string;
  mode: ExecutionMode;
  /** The policy in force, read on every request (e.g. from a PolicyRegistry). */
  policy: EndpointPolicy | (() => EndpointPolicy);
  maxBodyBytes: number;
  /** The permission a principal needs; checked on every request, replays included. */
  permission: string;
  authenticate: (authorization: string | null) => Promise<Principal | null>;
  input: z.ZodType<Input>;
  work: (input: Input, principal: Principal, context: WorkContext) => Promise<WorkResult>;
  rederive?: (reference: string, db: Queryable) => Promise<Buffer>;
  /** Told about unexpected errors (mapped to a bare 500); must not log request bodies. */
  onError?: (error: unknown, correlationId: string) => void;
}

function outcomeResponse(outcome: StoreOutcome): Response {
  const headers: Record<string, string> = {
    'Content-Type': outcome.contentType,
    'Cache-Control': 'no-store',
    'X-Correlation-Id': outcome.correlationId,
  };
  if (outcome.replayed) headers['Idempotent-Replayed'] = 'true';
  return new Response(new Uint8Array(outcome.body), { status: outcome.status, headers });
}

export function idempotentHandler<Input>(store: IdempotencyStore, endpoint: IdempotentEndpoint<Input>) {
  const method = endpoint.endpoint.split(' ')[0] ?? 'POST';
  return async function handle(request: Request): Promise<Response> {
    const correlationId = randomUUID();
    const fail = (problem: Problem) => problemResponse(problem, correlationId);
    try {
      const principal = await endpoint.authenticate(request.headers.get('authorization'));
      if (!principal) {
        return fail({ status: 401, slug: 'unauthenticated', title: 'Missing or invalid API key', headers: { 'WWW-Authenticate': 'Bearer' } });
      }
      if (!principal.permissions.includes(endpoint.permission)) {
        return fail({ status: 403, slug: 'forbidden', title: `This API key may not call ${endpoint.endpoint}` });
      }
      const key = parseIdempotencyKey(request.headers.get('idempotency-key'));
      if (!key.ok) return fail({ status: 400, slug: 'invalid-idempotency-key', title: 'Invalid Idempotency-Key', detail: key.detail });

      let raw: Buffer;
      try {
        raw = await readBodyLimited(request, endpoint.maxBodyBytes);
      } catch (error) {
        if (error instanceof BodyTooLargeError) {
          return fail({ status: 413, slug: 'body-too-large', title: 'Request body too large', detail: `The limit is ${endpoint.maxBodyBytes} bytes` });
        }
        throw error;
      }
      let json: unknown;
      try {
        json = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(raw));
      } catch {
        return fail({ status: 400, slug: 'invalid-json', title: 'The request body is not valid JSON' });
      }
      const parsed = endpoint.input.safeParse(json);
      if (!parsed.success) {
        return fail({
          status: 400,
          slug: 'invalid-body',
          title: 'The request body is invalid',
          errors: parsed.error.issues.map((issue) => ({ path: issue.path.join('.'), message: issue.message })),
        });
      }
      const input = parsed.data;
      const outcome = await store.execute({
        principalId: principal.principalId,
        endpoint: endpoint.endpoint,
        method,
        key: key.key,
        body: json,
        policy: typeof endpoint.policy === 'function' ? endpoint.policy() : endpoint.policy,
        mode: endpoint.mode,
        correlationId,
        work: (context) => endpoint.work(input, principal, context),
        rederive: endpoint.rederive,
      });
      return outcomeResponse(outcome);
    } catch (error) {
      if (error instanceof KeyInUseError) {
        return fail({
          status: 409,
          slug: 'key-in-use',
          title: 'A request with this Idempotency-Key is still in progress',
          detail: 'Retry after the time in Retry-After',
          headers: { 'Retry-After': String(error.retryAfterSeconds) },
        });
      }
      if (error instanceof FingerprintMismatchError) {
        return fail({ status: 422, slug: 'key-reused', title: 'This Idempotency-Key was already used with a different request' });
      }
      if (error instanceof KeyQuotaExceededError) {
        return fail({
          status: 429,
          slug: 'key-quota-exceeded',
          title: 'Too many live idempotency keys',
          headers: { 'Retry-After': String(error.retryAfterSeconds) },
        });
      }
      if (error instanceof InvalidKeyIdentityError) {
        return fail({ status: 400, slug: 'invalid-key-identity', title: 'The idempotency key cannot be stored', detail: error.message });
      }
      if (error instanceof UncanonicalRequestError) {
        return fail({ status: 400, slug: 'invalid-json', title: 'The request body cannot be canonicalised', detail: error.message });
      }
      endpoint.onError?.(error, correlationId);
      return fail({ status: 500, slug: 'internal', title: 'Internal error', detail: 'Retrying with the same Idempotency-Key is safe' });
    }
  };
}
