// The request fingerprint: HMAC-SHA256 under IDEMPOTENCY_SECRET of the method, the
// endpoint and the RFC 8785 canonical JSON of the body. Key order and whitespace do
// not change it; any value does. The body itself is never stored.
import { createHmac } from 'node:crypto';
import canonicalize from 'canonicalize';
import { UncanonicalRequestError } from './errors';

export interface CanonicalRequest {
  method: string;
  /** The endpoint actually called, also for intent-scoped keys, so reuse across endpoints is a mismatch. */
  endpoint: string;
  body: unknown;
}

export function canonicalBody(body: unknown): string {
  let canonical: string | undefined;
  try {
    canonical = canonicalize(body);
  } catch (error) {
    throw new UncanonicalRequestError(error instanceof Error ? error.message : 'not JSON');
  }
  if (canonical === undefined) throw new UncanonicalRequestError('not a JSON value');
  return canonical;
}

export function fingerprint(secret: Buffer, request: CanonicalRequest): Buffer {
  // Length-prefixed fields, so no choice of values can make two requests collide.
  const hmac = createHmac('sha256', secret);
  for (const field of [request.method.toUpperCase(), request.endpoint, canonicalBody(request.body)]) {
    const bytes = Buffer.from(field, 'utf8');
    const length = Buffer.alloc(4);
    length.writeUInt32BE(bytes.length);
    hmac.update(length).update(bytes);
  }
  return hmac.digest();
}
