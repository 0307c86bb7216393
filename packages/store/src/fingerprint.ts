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
  /** The body's canonical JSON when the caller already computed it (the HTTP layer, measuring a parsed body against its cap). */
  canonicalBody?: string;
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
  const method = request.method.toUpperCase();
  const { endpoint } = request;
  const body = request.canonicalBody ?? canonicalBody(request.body);
  const methodBytes = Buffer.byteLength(method, 'utf8');
  const endpointBytes = Buffer.byteLength(endpoint, 'utf8');
  const bodyBytes = Buffer.byteLength(body, 'utf8');
  const message = Buffer.allocUnsafe(12 + methodBytes + endpointBytes + bodyBytes);
  let offset = message.writeUInt32BE(methodBytes, 0);
  offset += message.write(method, offset, 'utf8');
  offset = message.writeUInt32BE(endpointBytes, offset);
  offset += message.write(endpoint, offset, 'utf8');
  offset = message.writeUInt32BE(bodyBytes, offset);
  message.write(body, offset, 'utf8');
  return createHmac('sha256', secret).update(message).digest();
}
