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
import { spawn } from 'node:child_process';
import { hash, randomUUID } from 'node:crypto';
import { constants, fstatSync, openSync, readFileSync, writeSync } from 'node:fs';
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
 * How clients make their keys: `random` (a version-4 UUID, the common choice), or `time-ordered` (a
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
  /** Print only the batch's rows from..from+count-1 (offsets within the batch), their expiries where the whole batch puts them. */
  slice?: { from: number; count: number };
}

/** Row n of the batch's expiry (epoch ms): the batch's expiries spread evenly over its window, in row order. */
export const expiryOf = (batch: Pick<RowBatch, 'windowStartMs' | 'windowMs' | 'count'>, n: number) => batch.windowStartMs + Math.floor(((n + 0.5) * batch.windowMs) / batch.count);

/** The first row of the batch expiring at or after `ms` (batch.count when none does). */
export function firstRowExpiringAt(batch: Pick<RowBatch, 'windowStartMs' | 'windowMs' | 'count'>, ms: number): number {
  let low = 0;
  let high = batch.count;
  while (low < high) {
    const middle = Math.floor((low + high) / 2);
    if (expiryOf(batch, middle) < ms) low = middle + 1;
    else high = middle;
  }
  return low;
}

/** The columns the COPY names, in the order of each row's fields. */
export const COPY_COLUMNS = [
  'principal_id', 'service', 'scope', 'key', 'state', 'fingerprint', 'correlation_id', 'lease_expires_at', 'response_status',
  'response_content_type', 'response_body', 'response_key_id', 'response_size', 'completed_at', 'created_at', 'expires_at',
] as const;

/** The COPY statement the row program's output is for: PostgreSQL's binary COPY format (no text to parse, no hex to decode). */
export const COPY_OPTIONS = '(FORMAT binary)';
/** The same into a heap truncated in the COPY's transaction: the rows go in frozen, their pages all-visible. */
export const COPY_FREEZE_OPTIONS = '(FORMAT binary, FREEZE)';

// Binary COPY (PostgreSQL docs, "Binary Format"): a signature, flags and header extension length,
// then per row a 16-bit field count and each field as a 32-bit length (-1 for NULL) and the
// type's binary form; a 16-bit -1 ends the data.
const SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');
const POSTGRES_EPOCH_MS = 946_684_800_000; // 2000-01-01T00:00:00Z: timestamptz counts microseconds from it

/** A reusable output buffer the rows are encoded into, flushed whole when the next row might not fit. */
class BinaryRows {
  private buffer: Buffer;
  private offset = 0;
  /**
   * `chunkBytes` set: every flushed chunk is whole rows and at most that long (a row that might not
   * fit is an error). Otherwise chunks of up to 1 MiB, grown for a row that needs more.
   */
  constructor(
    private readonly flush: (chunk: Buffer) => void,
    private readonly chunkBytes?: number,
  ) {
    this.buffer = Buffer.allocUnsafe(chunkBytes ?? 1 << 20);
  }

  /** Makes room for a row of at most `bytes`: what is buffered (whole rows) is flushed when it might not fit. */
  reserve(bytes: number): void {
    if (this.offset + bytes <= this.buffer.length) return;
    this.end();
    if (bytes > this.buffer.length) {
      if (this.chunkBytes !== undefined) throw new Error(`a row of up to ${bytes} bytes does not fit a ${this.chunkBytes}-byte chunk`);
      this.buffer = Buffer.allocUnsafe(bytes);
    }
  }
  end(): void {
    if (this.offset > 0) this.flush(this.buffer.subarray(0, this.offset));
    // The flushed bytes were written synchronously (or copied): the buffer is free again.
    this.offset = 0;
  }
  raw(bytes: Buffer): void {
    this.room(bytes.length);
    this.offset += bytes.copy(this.buffer, this.offset);
  }
  /** Buffer.write and copy cut what does not fit without a word: a row longer than reserved is an error instead. */
  private room(bytes: number): void {
    if (this.offset + bytes > this.buffer.length) throw new Error('a row is longer than the room reserved for it');
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
    this.room(value.length);
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

/**
 * How a printer frames its output. `whole`: the binary COPY header, the rows and the trailer,
 * in chunks of up to 1 MiB. `rows`: the rows alone, each write whole rows of at most PIPE_BUF
 * bytes, which a pipe takes atomically: several printers can then share one COPY's pipe, their
 * rows interleaved but never cut (the header and trailer are the launcher's).
 */
export type Framing = 'whole' | 'rows';

/** Linux's PIPE_BUF: a write to a pipe of at most this many bytes is never interleaved with another's. */
export const PIPE_BUF = 4096;

/** The binary COPY header and trailer, for a launcher whose printers write `rows`. */
export const COPY_HEADER = Buffer.concat([SIGNATURE, Buffer.alloc(8)]); // flags 0 (no OIDs), no header extension
export const COPY_TRAILER = Buffer.from([0xff, 0xff]); // a field count of -1

/** Writes the batch's rows (its slice's, if it has one) in binary COPY format to `write`, in chunks (each valid only during the call). */
export function printBatch(batch: RowBatch, secrets: LoaderSecrets, write: (chunk: Buffer) => void, framing: Framing = 'whole'): void {
  const print = new Fingerprinter(Buffer.from(secrets.fingerprintSecret, 'hex'));
  const ring = new ResponseKeyRing([{ id: secrets.keyId, key: Buffer.from(secrets.key, 'hex') }]);
  const principals = principalsOf(batch.seed);
  const out = new BinaryRows(write, framing === 'rows' ? PIPE_BUF : undefined);
  if (framing === 'whole') {
    out.reserve(COPY_HEADER.length);
    out.raw(COPY_HEADER);
  }
  const first = batch.slice?.from ?? 0;
  const end = batch.slice ? first + batch.slice.count : batch.count;
  if (first < 0 || end > batch.count || first > end) throw new Error(`rows ${first}..${end - 1} are not within the batch's ${batch.count}`);
  for (let n = first; n < end; n += 1) {
    const i = batch.from + n;
    const row = scaleRow(batch.seed, i, batch.principals, batch.keys);
    const expires = expiryOf(batch, n);
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
  if (framing === 'whole') {
    out.reserve(COPY_TRAILER.length);
    out.raw(COPY_TRAILER);
  }
  out.end();
}

/** Row i's correlation id: a UUIDv7 of its creation instant, its random bits drawn from (seed, i). */
export function correlationWords(seed: number, i: number, createdMs: number): [number, number, number, number] {
  return uuidV7Words(createdMs, mix(seed, 50, i), mix(seed, 51, i), mix(seed, 52, i));
}

/** Row i's correlation id as text. */
export const correlationOf = (seed: number, i: number, createdMs: number) => uuidText(correlationWords(seed, i, createdMs));

const count = z.number().int().nonnegative();
const programInput = z.object({
  secretsFile: z.string().min(1),
  batch: z.object({
    seed: z.number().int(),
    principals: z.number().int().positive(),
    from: count,
    count,
    windowStartMs: z.number().int(),
    windowMs: z.number().int().positive(),
    retentionMs: z.number().int().positive(),
    leaseMs: z.number().int().positive(),
    keys: z.enum(KEY_ORDERS).optional(),
    slice: z.object({ from: count, count }).optional(),
  }),
  /** Printers writing at once into the one pipe (child processes of this one, which writes the header and trailer). */
  printers: z.number().int().positive().max(64),
  framing: z.enum(['whole', 'rows']),
});
type ProgramInput = z.infer<typeof programInput>;

/** The program's command line: one JSON argument (the secrets stay in their file). */
export function programArgs(batch: RowBatch, secretsFile: string, printers = 1): string[] {
  const input: ProgramInput = { secretsFile, batch, printers, framing: 'whole' };
  return [JSON.stringify(input)];
}

/**
 * Standard output, blocking. The pipe the server hands the program arrives non-blocking (the
 * loader under tsx), and a full pipe then answers EAGAIN: spinning on it burns the CPU the other
 * printers and the COPY backend need, and sleeping left them idle a quarter of the time (measured:
 * 1.45 of 2 CPUs busy). Opening /proc/self/fd/1 again gives the same pipe a file description of
 * its own, blocking; where that is not possible, fd 1 as it is.
 */
const STDOUT = (() => {
  try {
    return openSync('/proc/self/fd/1', constants.O_WRONLY);
  } catch {
    return 1;
  }
})();

/** Writes `chunk` to standard output whole, waiting out a full pipe; in `rows` framing, in one write or not at all. */
function writeOut(chunk: Buffer, framing: Framing): void {
  let offset = 0;
  while (offset < chunk.length) {
    try {
      offset += writeSync(STDOUT, chunk, offset);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EAGAIN') throw error;
      // Standard output left non-blocking by someone: a millisecond's sleep, not a spin.
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
      continue;
    }
    if (framing === 'rows' && offset !== chunk.length) throw new Error(`a write of ${chunk.length} bytes was cut at ${offset}: rows of other printers may be interleaved`);
  }
}

/** Splits rows first..first+count-1 into `parts` runs as even as can be, in order. */
export function splitRows(first: number, rows: number, parts: number): { from: number; count: number }[] {
  const per = Math.floor(rows / parts);
  const extra = rows % parts;
  let from = first;
  return Array.from({ length: parts }, (_, part) => {
    const run = { from, count: per + (part < extra ? 1 : 0) };
    from += run.count;
    return run;
  }).filter((run) => run.count > 0);
}

/** Prints the header, runs `printers` copies of this program on parts of the rows into the same pipe, and prints the trailer once all succeeded. */
async function launch(input: ProgramInput): Promise<void> {
  // Only a pipe takes small writes whole from several writers (files keep an offset each).
  if (!fstatSync(1).isFIFO()) throw new Error('several printers need standard output to be a pipe');
  const first = input.batch.slice?.from ?? 0;
  const rows = input.batch.slice?.count ?? input.batch.count;
  writeOut(COPY_HEADER, 'whole');
  const children = splitRows(first, rows, input.printers).map((slice) => {
    const child: ProgramInput = { ...input, batch: { ...input.batch, slice }, printers: 1, framing: 'rows' };
    return spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), JSON.stringify(child)], { stdio: ['ignore', 'inherit', 'inherit'] });
  });
  const codes = await Promise.all(
    children.map(
      (child) =>
        new Promise<number>((resolve) => {
          child.on('error', () => resolve(1));
          child.on('exit', (code, signal) => {
            // One printer failed: stop the rest; the trailer is never printed, so the COPY fails too.
            if (code !== 0) for (const other of children) other.kill();
            resolve(code ?? (signal ? 1 : 0));
          });
        }),
    ),
  );
  if (codes.some((code) => code !== 0)) {
    process.exitCode = 1;
    return;
  }
  writeOut(COPY_TRAILER, 'whole');
}

async function main(argv: string[]): Promise<void> {
  const input = programInput.parse(JSON.parse(argv[0] ?? 'null'));
  if (input.printers > 1) return launch(input);
  const secrets = loaderSecrets.parse(JSON.parse(readFileSync(input.secretsFile, 'utf8')));
  // Synchronous writes to the pipe: COPY reads as fast as it parses, and memory stays flat.
  printBatch(input.batch, secrets, (chunk) => writeOut(chunk, input.framing), input.framing);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main(process.argv.slice(2));
