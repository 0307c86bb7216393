// The scale bench's key rows: row i of a load is a pure function of (seed, i), so the loader
// can write millions of them through COPY ... FROM PROGRAM (this file, run by the database
// server, prints them in binary COPY format) and a test can rebuild any one of them to replay it.
// It is the load's hot loop (86.4 M rows at about 20 us of CPU each): hex by table, dates by a
// cached day prefix, JSON written as JSON.stringify would write it, HMAC by one-shot hashes, one
// reused output buffer; the test checks each shortcut against what it replaces.
// Proportions follow the demo's traffic (server/demo/traffic.ts): about 72 % payments and 28 %
// refunds, keys `order-<uuid>` and `refund-<uuid>`, a crashed handler's stale claim and a
// failed request once in about a thousand, responses as the demo's handlers write them
// (server/demo/payments.ts), sealed under the run's key as the store seals them. Principals are
// skewed: the first tenth of them hold about a third of the keys, as a few large tenants do.
import { hash, randomUUID } from 'node:crypto';
import { readFileSync, writeSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ResponseKeyRing } from '@retrysafe/store';
import { z } from 'zod';

export const SCALE_SERVICE = 'orders';
export const PAYMENTS_SCOPE = 'POST /api/v1/payments';
export const REFUNDS_SCOPE = 'POST /api/v1/refunds';
const CURRENCIES = ['EUR', 'USD', 'GBP'] as const;

/** What the scale and cleanup benches' new keys' work answers: a demo payment's response, one for the run. */
export const NEW_KEY_RESPONSE = Buffer.from(
  JSON.stringify({ id: `pay_${randomUUID()}`, object: 'payment', amount: 1250, currency: 'EUR', description: 'Order 1234, 2 item(s)', status: 'succeeded', created: new Date().toISOString() }),
);

export type ScaleRowState = 'completed' | 'failed' | 'in_progress';

/**
 * How clients make their keys: `random` (a version-4 UUID, the demo's), or `time-ordered` (a
 * UUIDv7: 48 bits of milliseconds first, so a principal's new keys sort after its old ones and its
 * claims insert at the right edge of its range of the unique index). Row i's time-ordered key
 * carries the instant KEY_EPOCH_MS + i: as if written at 1,000 a second, later rows later.
 */
export const KEY_ORDERS = ['random', 'time-ordered'] as const;
export type KeyOrder = (typeof KEY_ORDERS)[number];
const KEY_EPOCH_MS = 1_700_000_000_000;

export interface ScaleRow {
  principalId: string;
  scope: string;
  key: string;
  /** The request's body: a retry with this body is a replay, with another a mismatch. */
  body: Record<string, unknown>;
  /** Its canonical JSON (RFC 8785): its keys are written in sorted order and hold integers and ASCII text only. */
  canonicalBody: string;
  state: ScaleRowState;
  /** The response the first request got (completed rows only). */
  response: Buffer | null;
}

/** A 32-bit mix of (a, b, c) (murmur3's finaliser over a simple combination). */
function mix(a: number, b: number, c: number): number {
  let h = Math.imul(a ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(b + 0x7f4a7c15, 0xc2b2ae35) ^ Math.imul(c + 0x165667b1, 0x27d4eb2f);
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

// Hex by table (a byte's two digits), not toString(16).padStart: the row program formats
// several UUIDs a row, and this was a quarter of its CPU.
const HEX2 = Array.from({ length: 256 }, (_, n) => n.toString(16).padStart(2, '0'));
const hex4 = (n: number) => `${HEX2[(n >>> 8) & 0xff] ?? ''}${HEX2[n & 0xff] ?? ''}`;
const hex8 = (n: number) => `${hex4(n >>> 16)}${hex4(n & 0xffff)}`;

/** A version-4-shaped UUID's four 32-bit words from the four draws of (seed, stream..stream+3, n): version and variant bits set. */
function uuidWords(seed: number, stream: number, n: number): [number, number, number, number] {
  const a = mix(seed, stream, n);
  const b = mix(seed, stream + 1, n);
  const c = mix(seed, stream + 2, n);
  const d = mix(seed, stream + 3, n);
  return [a, ((b & 0xffff0000) | 0x4000 | (b & 0xfff)) >>> 0, ((((c >>> 28) & 0x3) | 0x8) << 28 | (c & 0x0fffffff)) >>> 0, d];
}

const uuidText = ([a, b, c, d]: readonly number[]) => `${hex8(a ?? 0)}-${hex4((b ?? 0) >>> 16)}-${hex4((b ?? 0) & 0xffff)}-${hex4((c ?? 0) >>> 16)}-${hex4((c ?? 0) & 0xffff)}${hex8(d ?? 0)}`;

/** A UUIDv7's four 32-bit words: 48 bits of `ms`, version 7, 12 bits of `a`, variant 8, then 30 bits of `b` and 32 of `c`. */
export function uuidV7Words(ms: number, a: number, b: number, c: number): [number, number, number, number] {
  const high = Math.floor(ms / 0x1_0000);
  return [high >>> 0, (((ms - high * 0x1_0000) << 16) | 0x7000 | (a >>> 20)) >>> 0, ((0x8000_0000 | (b >>> 2)) & 0xbfff_ffff) >>> 0, c >>> 0];
}

/** A UUIDv7 of `ms` (random bits from `random`, e.g. crypto.randomBytes(12)), as text: what a client with time-ordered keys sends. */
export function uuidV7(ms: number, random: Buffer): string {
  return uuidText(uuidV7Words(ms, random.readUInt32BE(0), random.readUInt32BE(4), random.readUInt32BE(8)));
}

/** Row i's key's UUID: version 4 from (seed, i), or a UUIDv7 of KEY_EPOCH_MS + i. */
const keyUuidOf = (seed: number, i: number, keys: KeyOrder) =>
  keys === 'random' ? uuidOf(seed, 10, i) : uuidText(uuidV7Words(KEY_EPOCH_MS + i, mix(seed, 10, i), mix(seed, 11, i), mix(seed, 12, i)));

/** A version-4-shaped UUID drawn from (seed, stream, n). */
function uuidOf(seed: number, stream: number, n: number): string {
  return uuidText(uuidWords(seed, stream, n));
}

/** The principal of row i: the square of a uniform draw skews keys toward the first principals. */
export function principalOf(seed: number, index: number): string {
  return uuidOf(seed, 100, index);
}

const pad2 = Array.from({ length: 100 }, (_, n) => String(n).padStart(2, '0'));
const pad3 = Array.from({ length: 1000 }, (_, n) => String(n).padStart(3, '0'));
const dayPrefixes = new Map<number, string>();

/** `new Date(ms).toISOString()` for instants after 1970, the date part cached per day (one Date a day, not a row). */
export function isoOf(ms: number): string {
  const day = Math.floor(ms / 86_400_000);
  let prefix = dayPrefixes.get(day);
  if (prefix === undefined) {
    prefix = new Date(day * 86_400_000).toISOString().slice(0, 11);
    dayPrefixes.set(day, prefix);
  }
  let rest = ms - day * 86_400_000;
  const milli = rest % 1000;
  rest = (rest - milli) / 1000;
  const second = rest % 60;
  rest = (rest - second) / 60;
  return `${prefix}${pad2[Math.floor(rest / 60)] ?? ''}:${pad2[rest % 60] ?? ''}:${pad2[second] ?? ''}.${pad3[milli] ?? ''}Z`;
}

/** The principal ids of a load, cached: there are a few thousand, drawn for every row. */
class Principals {
  private readonly texts = new Map<number, string>();
  private readonly words = new Map<number, readonly number[]>();
  constructor(private readonly seed: number) {}
  text(index: number): string {
    let text = this.texts.get(index);
    if (text === undefined) {
      text = uuidText(this.wordsOf(index));
      this.texts.set(index, text);
    }
    return text;
  }
  wordsOf(index: number): readonly number[] {
    let words = this.words.get(index);
    if (words === undefined) {
      words = uuidWords(this.seed, 100, index);
      this.words.set(index, words);
    }
    return words;
  }
}

const principalCaches = new Map<number, Principals>();
const principalsOf = (seed: number) => {
  let cache = principalCaches.get(seed);
  if (!cache) {
    cache = new Principals(seed);
    principalCaches.set(seed, cache);
  }
  return cache;
};

/** Row i's principal: its index among the load's principals. */
const principalIndex = (seed: number, i: number, principals: number) => {
  const u = mix(seed, 1, i) / 0x1_0000_0000;
  return Math.floor(principals * u * u);
};

export function scaleRow(seed: number, i: number, principals: number, keys: KeyOrder = 'random'): ScaleRow {
  const principalId = principalsOf(seed).text(principalIndex(seed, i, principals));
  const kind = mix(seed, 2, i) / 0x1_0000_0000;
  const fate = mix(seed, 3, i) % 1000;
  const state: ScaleRowState = fate === 0 ? 'in_progress' : fate === 1 ? 'failed' : 'completed';
  const amount = 100 + (mix(seed, 4, i) % 250_000);
  const created = isoOf(1_700_000_000_000 + (mix(seed, 5, i) % 86_400_000));
  // The canonical bodies and responses are written as JSON.stringify writes these objects (keys
  // in this order, integers and ASCII text with nothing to escape), without building them twice.
  if (kind < 0.72) {
    const currency = CURRENCIES[mix(seed, 6, i) % CURRENCIES.length] ?? 'EUR';
    const description = mix(seed, 7, i) % 2 === 0 ? `Order ${mix(seed, 8, i) % 1_000_000}, ${1 + (i % 5)} item(s)` : null;
    const body: Record<string, unknown> = description === null ? { amount, currency } : { amount, currency, description };
    const canonicalBody = description === null ? `{"amount":${amount},"currency":"${currency}"}` : `{"amount":${amount},"currency":"${currency}","description":"${description}"}`;
    const response =
      state === 'completed'
        ? Buffer.from(
            `{"id":"pay_${uuidOf(seed, 20, i)}","object":"payment","amount":${amount},"currency":"${currency}","description":${description === null ? 'null' : `"${description}"`},"status":"succeeded","created":"${created}"}`,
          )
        : null;
    return { principalId, scope: PAYMENTS_SCOPE, key: `order-${keyUuidOf(seed, i, keys)}`, body, canonicalBody, state, response };
  }
  const payment = `pay_${uuidOf(seed, 30, i)}`;
  const refundAmount = 1 + (amount % 50);
  const response =
    state === 'completed'
      ? Buffer.from(
          `{"id":"ref_${uuidOf(seed, 40, i)}","object":"refund","payment":"${payment}","amount":${refundAmount},"status":"succeeded","processorReference":"proc_${hex8(mix(seed, 9, i))}","created":"${created}"}`,
        )
      : null;
  const body = { amount: refundAmount, payment };
  return { principalId, scope: REFUNDS_SCOPE, key: `refund-${keyUuidOf(seed, i, keys)}`, body, canonicalBody: `{"amount":${refundAmount},"payment":"${payment}"}`, state, response };
}

/** The secrets a load seals and fingerprints with, as the loader hands them to the row program (a file, never the command line). */
export const loaderSecrets = z.object({
  fingerprintSecret: z.string().regex(/^[0-9a-f]{64}$/),
  keyId: z.string().min(1),
  key: z.string().regex(/^[0-9a-f]{64}$/),
});
export type LoaderSecrets = z.infer<typeof loaderSecrets>;

export interface RowBatch {
  seed: number;
  principals: number;
  /** Rows from..from+count-1. */
  from: number;
  count: number;
  /** Expiries spread evenly over [windowStartMs, windowStartMs + windowMs), in row order (as traffic writes them). */
  windowStartMs: number;
  windowMs: number;
  retentionMs: number;
  leaseMs: number;
  /** Random by default. */
  keys?: KeyOrder;
}

/** The columns the COPY names, in the order of each row's fields. */
export const COPY_COLUMNS = [
  'principal_id', 'service', 'scope', 'key', 'state', 'fingerprint', 'correlation_id', 'lease_expires_at', 'response_status',
  'response_content_type', 'response_body', 'response_key_id', 'response_size', 'completed_at', 'created_at', 'expires_at',
] as const;

/** The COPY statement the row program's output is for: PostgreSQL's binary COPY format (no text to parse, no hex to decode). */
export const COPY_OPTIONS = '(FORMAT binary)';

// Binary COPY (PostgreSQL docs, "Binary Format"): a signature, flags and header extension length,
// then per row a 16-bit field count and each field as a 32-bit length (-1 for NULL) and the
// type's binary form; a 16-bit -1 ends the data.
const SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');
const POSTGRES_EPOCH_MS = 946_684_800_000; // 2000-01-01T00:00:00Z: timestamptz counts microseconds from it

/** A reusable output buffer the rows are encoded into, flushed whole when the next row might not fit. */
class BinaryRows {
  private buffer = Buffer.allocUnsafe(1 << 20);
  private offset = 0;
  constructor(private readonly flush: (chunk: Buffer) => void) {}

  /** Makes room for a row of at most `bytes`. */
  reserve(bytes: number): void {
    if (this.offset + bytes <= this.buffer.length) return;
    this.end();
    if (bytes > this.buffer.length) this.buffer = Buffer.allocUnsafe(bytes);
  }
  end(): void {
    if (this.offset > 0) this.flush(this.buffer.subarray(0, this.offset));
    // The flushed bytes were written synchronously (or copied): the buffer is free again.
    this.offset = 0;
  }
  raw(bytes: Buffer): void {
    this.offset += bytes.copy(this.buffer, this.offset);
  }
  int16(value: number): void {
    this.offset = this.buffer.writeInt16BE(value, this.offset);
  }
  int32(value: number): void {
    this.offset = this.buffer.writeInt32BE(value, this.offset);
  }
  null(): void {
    this.int32(-1);
  }
  /** text (ASCII only: its length in bytes is its length in characters). */
  ascii(value: string): void {
    this.int32(value.length);
    this.offset += this.buffer.write(value, this.offset, 'latin1');
  }
  bytea(value: Buffer): void {
    this.int32(value.length);
    this.raw(value);
  }
  uuid(words: readonly number[]): void {
    this.int32(16);
    for (const word of words) this.offset = this.buffer.writeUInt32BE(word, this.offset);
  }
  /** smallint */
  smallint(value: number): void {
    this.int32(2);
    this.int16(value);
  }
  integer(value: number): void {
    this.int32(4);
    this.int32(value);
  }
  /** timestamptz from epoch milliseconds: int64 microseconds since 2000-01-01 UTC (exact below 2^53). */
  timestamp(ms: number): void {
    const micros = (ms - POSTGRES_EPOCH_MS) * 1000;
    const high = Math.floor(micros / 0x1_0000_0000);
    this.int32(8);
    this.int32(high);
    this.offset = this.buffer.writeUInt32BE(micros - high * 0x1_0000_0000, this.offset);
  }
}

/**
 * The store's request fingerprint (packages/store/src/fingerprint.ts: HMAC-SHA256 over the
 * length-prefixed method, endpoint and canonical body) of POST requests, computed as RFC 2104
 * defines HMAC with two one-shot hashes over a reused buffer: createHmac's object and key
 * schedule per row were a sixth of the row program's CPU. The test checks it against the store's.
 */
export class Fingerprinter {
  private readonly inner = Buffer.alloc(64 + 4096);
  private readonly outer = Buffer.alloc(64 + 32);
  constructor(secret: Buffer) {
    // Keys longer than SHA-256's block are hashed first (RFC 2104); the loader's are 32 bytes.
    const key = secret.length > 64 ? hash('sha256', secret, 'buffer') : secret;
    for (let n = 0; n < 64; n += 1) {
      this.inner[n] = (key[n] ?? 0) ^ 0x36;
      this.outer[n] = (key[n] ?? 0) ^ 0x5c;
    }
  }
  of(endpoint: string, canonicalBody: string): Buffer {
    // [4-byte length]POST[4-byte length]endpoint[4-byte length]body, all ASCII here.
    let offset = this.inner.writeUInt32BE(4, 64);
    offset += this.inner.write('POST', offset, 'latin1');
    offset = this.inner.writeUInt32BE(endpoint.length, offset);
    offset += this.inner.write(endpoint, offset, 'latin1');
    offset = this.inner.writeUInt32BE(canonicalBody.length, offset);
    offset += this.inner.write(canonicalBody, offset, 'latin1');
    hash('sha256', this.inner.subarray(0, offset), 'buffer').copy(this.outer, 64);
    return hash('sha256', this.outer, 'buffer');
  }
}

/** Writes the batch's rows in binary COPY format to `write`, in chunks (each valid only during the call). */
export function printBatch(batch: RowBatch, secrets: LoaderSecrets, write: (chunk: Buffer) => void): void {
  const print = new Fingerprinter(Buffer.from(secrets.fingerprintSecret, 'hex'));
  const ring = new ResponseKeyRing([{ id: secrets.keyId, key: Buffer.from(secrets.key, 'hex') }]);
  const principals = principalsOf(batch.seed);
  const out = new BinaryRows(write);
  out.reserve(19);
  out.raw(SIGNATURE);
  out.int32(0); // flags: no OIDs
  out.int32(0); // no header extension
  for (let n = 0; n < batch.count; n += 1) {
    const i = batch.from + n;
    const row = scaleRow(batch.seed, i, batch.principals, batch.keys);
    const expires = batch.windowStartMs + Math.floor(((n + 0.5) * batch.windowMs) / batch.count);
    const created = expires - batch.retentionMs;
    const sealed = row.state === 'completed' && row.response ? ring.seal(row.response, { principalId: row.principalId, service: SCALE_SERVICE, scope: row.scope, key: row.key }) : null;
    // Fields, lengths and the sealed body: well under 1 KiB besides the body.
    out.reserve(1024 + (sealed?.ciphertext.length ?? 0));
    out.int16(COPY_COLUMNS.length);
    out.uuid(principals.wordsOf(principalIndex(batch.seed, i, batch.principals)));
    out.ascii(SCALE_SERVICE);
    out.ascii(row.scope);
    out.ascii(row.key);
    out.ascii(row.state);
    out.bytea(print.of(row.scope, row.canonicalBody));
    // A correlation id: a UUIDv7 of the creation instant, as the store writes them.
    out.uuid(correlationWords(batch.seed, i, created));
    // A crashed handler's claim: its lease ran out a while after it was made.
    if (row.state === 'in_progress') out.timestamp(created + batch.leaseMs);
    else out.null();
    if (sealed && row.response) {
      out.smallint(201);
      out.ascii('application/json');
      out.bytea(sealed.ciphertext);
      out.ascii(sealed.keyId);
      out.integer(row.response.length);
      out.timestamp(created + 40 + (i % 200));
    } else {
      for (let field = 0; field < 6; field += 1) out.null();
    }
    out.timestamp(created);
    out.timestamp(expires);
  }
  out.reserve(2);
  out.int16(-1);
  out.end();
}

/** Row i's correlation id: a UUIDv7 of its creation instant, its random bits drawn from (seed, i). */
export function correlationWords(seed: number, i: number, createdMs: number): [number, number, number, number] {
  return uuidV7Words(createdMs, mix(seed, 50, i), mix(seed, 51, i), mix(seed, 52, i));
}

/** Row i's correlation id as text. */
export const correlationOf = (seed: number, i: number, createdMs: number) => uuidText(correlationWords(seed, i, createdMs));

const batchArgs = z.object({
  secretsFile: z.string().min(1),
  seed: z.coerce.number().int(),
  principals: z.coerce.number().int().positive(),
  from: z.coerce.number().int().nonnegative(),
  count: z.coerce.number().int().nonnegative(),
  windowStartMs: z.coerce.number().int(),
  windowMs: z.coerce.number().int().positive(),
  retentionMs: z.coerce.number().int().positive(),
  leaseMs: z.coerce.number().int().positive(),
  keys: z.enum(KEY_ORDERS),
});

/** The program's command line, in the order main() reads it. */
export function programArgs(batch: RowBatch, secretsFile: string): string[] {
  return [secretsFile, batch.seed, batch.principals, batch.from, batch.count, batch.windowStartMs, batch.windowMs, batch.retentionMs, batch.leaseMs, batch.keys ?? 'random'].map(String);
}

function main(argv: string[]): void {
  const [secretsFile, seed, principals, from, count, windowStartMs, windowMs, retentionMs, leaseMs, keys] = argv;
  const batch = batchArgs.parse({ secretsFile, seed, principals, from, count, windowStartMs, windowMs, retentionMs, leaseMs, keys });
  const secrets = loaderSecrets.parse(JSON.parse(readFileSync(batch.secretsFile, 'utf8')));
  // Synchronous writes to the pipe: COPY reads as fast as it parses, and memory stays flat.
  printBatch(batch, secrets, (chunk) => {
    let offset = 0;
    while (offset < chunk.length) {
      try {
        offset += writeSync(1, chunk, offset);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EAGAIN') throw error;
      }
    }
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main(process.argv.slice(2));
