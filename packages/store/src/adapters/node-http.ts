// Shared by the Node-server adapters (Express, Fastify): writing an answer to a ServerResponse-like
// object and reading a not-yet-consumed IncomingMessage with a cap.
import type { IncomingMessage } from 'node:http';
import { readLimited, tooLarge, type RequestBody } from '../http.js';

export function declaredLength(headers: IncomingMessage['headers']): number | null {
  const value = Number(headers['content-length'] ?? NaN);
  return Number.isFinite(value) && value >= 0 ? value : null;
}

/**
 * The size of the body a parser read from this request, as far as the headers tell it: the
 * Content-Length of a body sent without a Content-Encoding (Node's parser delivers exactly those
 * bytes). A compressed body's Content-Length is its compressed size, and a chunked body has none:
 * null, the decoded size is not known.
 */
export function unencodedLength(headers: IncomingMessage['headers']): number | null {
  const encoding = headers['content-encoding'];
  if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') return null;
  return declaredLength(headers);
}

export function streamBody(message: IncomingMessage): RequestBody {
  return {
    kind: 'stream',
    read: async (maxBytes) => {
      const declared = declaredLength(message.headers);
      if (declared !== null && declared > maxBytes) throw tooLarge(maxBytes);
      return readLimited(message as AsyncIterable<Uint8Array>, maxBytes);
    },
  };
}

export function headerOf(headers: IncomingMessage['headers'], name: string): string | null {
  const value = headers[name.toLowerCase()];
  if (value === undefined) return null;
  return Array.isArray(value) ? value.join(', ') : value;
}
