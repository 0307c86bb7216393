// The request fingerprint: HMAC-SHA256 under IDEMPOTENCY_SECRET of the method, the
// endpoint and the RFC 8785 canonical JSON of the body. Key order and whitespace do
// not change it; any value does. The body itself is never stored.
import { createHmac } from 'node:crypto';
import canonicalize from 'canonicalize';
import { UncanonicalRequestError } from './errors.js';

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
  // One buffer of [length][bytes] fields, hashed in one update (the same bytes as field by field).
  const fields = [request.method.toUpperCase(), request.endpoint, canonicalBody(request.body)];
  const sizes = fields.map((field) => Buffer.byteLength(field, 'utf8'));
  const message = Buffer.allocUnsafe(sizes.reduce((total, size) => total + 4 + size, 0));
  let offset = 0;
  fields.forEach((field, index) => {
    offset = message.writeUInt32BE(sizes[index] ?? 0, offset);
    offset += message.write(field, offset, 'utf8');
  });
  return createHmac('sha256', secret).update(message).digest();
}
