// RESPONSE_ENCRYPTION_KEYS' format, shared by the dashboard and every adopting service:
// `id:base64key` entries, comma-separated; each key 32 bytes (AES-256); the first one encrypts.
import type { ResponseKey } from './response-codec.js';

export function parseResponseKeys(value: string): ResponseKey[] {
  const keys: ResponseKey[] = [];
  for (const entry of value.split(',').map((part) => part.trim()).filter(Boolean)) {
    const separator = entry.indexOf(':');
    const id = entry.slice(0, separator);
    if (separator <= 0 || !/^[A-Za-z0-9_-]{1,32}$/.test(id)) throw new RangeError('each entry must be id:base64key with an id of [A-Za-z0-9_-]{1,32}');
    const encoded = entry.slice(separator + 1);
    const key = Buffer.from(encoded, 'base64');
    if (key.length !== 32 || !/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) throw new RangeError(`key "${id}" must be base64 of 32 bytes`);
    if (keys.some((existing) => existing.id === id)) throw new RangeError(`key id "${id}" appears twice`);
    keys.push({ id, key });
  }
  if (keys.length === 0) throw new RangeError('needs at least one key');
  return keys;
}
