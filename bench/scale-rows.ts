// The scale bench's key rows: row i of a load is a pure function of (seed, i), so the loader
// can write millions of them through COPY ... FROM PROGRAM (this file, run by the database
// server, prints them as COPY text) and a test can rebuild any one of them to replay it.
// Proportions follow the demo's traffic (server/demo/traffic.ts): about 72 % payments and 28 %
// refunds, keys `order-<uuid>` and `refund-<uuid>`, a crashed handler's stale claim and a
// failed request once in about a thousand, responses as the demo's handlers write them
// (server/demo/payments.ts), sealed under the run's key as the store seals them. Principals are
// skewed: the first tenth of them hold about a third of the keys, as a few large tenants do.
import { readFileSync, writeSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ResponseKeyRing, fingerprint } from '@retrysafe/store';
import { z } from 'zod';

export const SCALE_SERVICE = 'orders';
export const PAYMENTS_SCOPE = 'POST /api/v1/payments';
export const REFUNDS_SCOPE = 'POST /api/v1/refunds';
const CURRENCIES = ['EUR', 'USD', 'GBP'] as const;

export type ScaleRowState = 'completed' | 'failed' | 'in_progress';

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

const hex8 = (n: number) => n.toString(16).padStart(8, '0');

/** A version-4-shaped UUID drawn from (seed, stream, n). */
function uuidOf(seed: number, stream: number, n: number): string {
  const a = hex8(mix(seed, stream, n));
  const b = hex8(mix(seed, stream + 1, n));
  const c = hex8(mix(seed, stream + 2, n));
  const d = hex8(mix(seed, stream + 3, n));
  return `${a}-${b.slice(0, 4)}-4${b.slice(5, 8)}-${((Number.parseInt(c[0] ?? '0', 16) & 0x3) | 0x8).toString(16)}${c.slice(1, 4)}-${c.slice(4)}${d}`;
}

/** The principal of row i: the square of a uniform draw skews keys toward the first principals. */
export function principalOf(seed: number, index: number): string {
  return uuidOf(seed, 100, index);
}

export function scaleRow(seed: number, i: number, principals: number): ScaleRow {
  const u = mix(seed, 1, i) / 0x1_0000_0000;
  const principalId = principalOf(seed, Math.floor(principals * u * u));
  const kind = mix(seed, 2, i) / 0x1_0000_0000;
  const fate = mix(seed, 3, i) % 1000;
  const state: ScaleRowState = fate === 0 ? 'in_progress' : fate === 1 ? 'failed' : 'completed';
  const amount = 100 + (mix(seed, 4, i) % 250_000);
  const created = new Date(1_700_000_000_000 + (mix(seed, 5, i) % 86_400_000)).toISOString();
  if (kind < 0.72) {
    const currency = CURRENCIES[mix(seed, 6, i) % CURRENCIES.length] ?? 'EUR';
    const description = mix(seed, 7, i) % 2 === 0 ? `Order ${mix(seed, 8, i) % 1_000_000}, ${1 + (i % 5)} item(s)` : null;
    const body: Record<string, unknown> = description === null ? { amount, currency } : { amount, currency, description };
    const canonicalBody = JSON.stringify(body);
    const response = Buffer.from(JSON.stringify({ id: `pay_${uuidOf(seed, 20, i)}`, object: 'payment', amount, currency, description, status: 'succeeded', created }));
    return { principalId, scope: PAYMENTS_SCOPE, key: `order-${uuidOf(seed, 10, i)}`, body, canonicalBody, state, response: state === 'completed' ? response : null };
  }
  const payment = `pay_${uuidOf(seed, 30, i)}`;
  const refundAmount = 1 + (amount % 50);
  const response = Buffer.from(
    JSON.stringify({ id: `ref_${uuidOf(seed, 40, i)}`, object: 'refund', payment, amount: refundAmount, status: 'succeeded', processorReference: `proc_${hex8(mix(seed, 9, i))}`, created }),
  );
  const body = { amount: refundAmount, payment };
  return { principalId, scope: REFUNDS_SCOPE, key: `refund-${uuidOf(seed, 10, i)}`, body, canonicalBody: JSON.stringify(body), state, response: state === 'completed' ? response : null };
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
}

/** The columns the COPY names, in the order of each printed line. */
export const COPY_COLUMNS = [
  'principal_id', 'service', 'scope', 'key', 'state', 'fingerprint', 'correlation_id', 'lease_expires_at', 'response_status',
  'response_content_type', 'response_body', 'response_key_id', 'response_size', 'completed_at', 'created_at', 'expires_at',
] as const;

const NULL = '\\N';
const bytea = (value: Buffer) => `\\\\x${value.toString('hex')}`;
const timestamp = (ms: number) => new Date(ms).toISOString();

/** Writes the batch's rows as COPY text to `write`, in chunks. */
export function printBatch(batch: RowBatch, secrets: LoaderSecrets, write: (chunk: string) => void): void {
  const secret = Buffer.from(secrets.fingerprintSecret, 'hex');
  const ring = new ResponseKeyRing([{ id: secrets.keyId, key: Buffer.from(secrets.key, 'hex') }]);
  let lines: string[] = [];
  for (let n = 0; n < batch.count; n += 1) {
    const i = batch.from + n;
    const row = scaleRow(batch.seed, i, batch.principals);
    const expires = batch.windowStartMs + Math.floor(((n + 0.5) * batch.windowMs) / batch.count);
    const created = expires - batch.retentionMs;
    const print = fingerprint(secret, { method: 'POST', endpoint: row.scope, body: row.body, canonicalBody: row.canonicalBody });
    // A correlation id: a UUIDv7 of the creation instant, as the store writes them.
    const correlation = `${created.toString(16).padStart(12, '0').replace(/^(.{8})(.{4})$/, '$1-$2')}-7${hex8(mix(batch.seed, 50, i)).slice(0, 3)}-8${hex8(mix(batch.seed, 51, i)).slice(0, 3)}-${hex8(mix(batch.seed, 52, i))}${hex8(mix(batch.seed, 53, i)).slice(0, 4)}`;
    const completed = row.state === 'completed' && row.response !== null;
    const sealed = completed && row.response ? ring.seal(row.response, { principalId: row.principalId, service: SCALE_SERVICE, scope: row.scope, key: row.key }) : null;
    lines.push(
      [
        row.principalId,
        SCALE_SERVICE,
        row.scope,
        row.key,
        row.state,
        bytea(print),
        correlation,
        // A crashed handler's claim: its lease ran out a while after it was made.
        row.state === 'in_progress' ? timestamp(created + batch.leaseMs) : NULL,
        completed ? '201' : NULL,
        completed ? 'application/json' : NULL,
        sealed ? bytea(sealed.ciphertext) : NULL,
        sealed ? sealed.keyId : NULL,
        completed && row.response ? String(row.response.length) : NULL,
        completed ? timestamp(created + 40 + (i % 200)) : NULL,
        timestamp(created),
        timestamp(expires),
      ].join('\t'),
    );
    if (lines.length === 2_000) {
      write(`${lines.join('\n')}\n`);
      lines = [];
    }
  }
  if (lines.length > 0) write(`${lines.join('\n')}\n`);
}

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
});

/** The program's command line, in the order main() reads it. */
export function programArgs(batch: RowBatch, secretsFile: string): string[] {
  return [secretsFile, batch.seed, batch.principals, batch.from, batch.count, batch.windowStartMs, batch.windowMs, batch.retentionMs, batch.leaseMs].map(String);
}

function main(argv: string[]): void {
  const [secretsFile, seed, principals, from, count, windowStartMs, windowMs, retentionMs, leaseMs] = argv;
  const batch = batchArgs.parse({ secretsFile, seed, principals, from, count, windowStartMs, windowMs, retentionMs, leaseMs });
  const secrets = loaderSecrets.parse(JSON.parse(readFileSync(batch.secretsFile, 'utf8')));
  // Synchronous writes to the pipe: COPY reads as fast as it parses, and memory stays flat.
  printBatch(batch, secrets, (chunk) => {
    let offset = 0;
    const buffer = Buffer.from(chunk);
    while (offset < buffer.length) {
      try {
        offset += writeSync(1, buffer, offset);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EAGAIN') throw error;
      }
    }
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main(process.argv.slice(2));
