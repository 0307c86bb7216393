// The demo's payments and refunds: the effects the store protects. Responses are
// serialised deterministically from the stored rows, so a replay re-derived from a
// reference (a body over the cap) is the same bytes as the original.
import { createHash, randomBytes } from 'node:crypto';
import { z } from 'zod';
import { storableText } from '../storable';
import type { Queryable } from '@retrysafe/store/postgres';
import type { WorkResult } from '@retrysafe/store';
import { transactionOn, type HeldConnection } from '../../db/transaction';
import { ProcessorUnavailableError, type FakeProcessor } from './processor';

const JSON_TYPE = 'application/json';

export const paymentInput = z.strictObject({
  amount: z.number().int().positive().max(Number.MAX_SAFE_INTEGER),
  currency: z.string().regex(/^[A-Z]{3}$/, 'must be an ISO 4217 code of three capital letters'),
  description: storableText().max(500).optional(),
});
export type PaymentInput = z.infer<typeof paymentInput>;

export const refundInput = z.strictObject({
  payment: z.string().regex(/^pay_[a-z0-9]{1,64}$/, 'must be a payment id'),
  amount: z.number().int().positive().max(Number.MAX_SAFE_INTEGER),
});
export type RefundInput = z.infer<typeof refundInput>;

function newId(prefix: string): string {
  return `${prefix}_${randomBytes(12).toString('hex')}`;
}

interface PaymentRow {
  id: string;
  amount: string;
  currency: string;
  description: string | null;
  status: string;
  created_at: Date;
}

function paymentBody(row: PaymentRow): Buffer {
  return Buffer.from(
    JSON.stringify({
      id: row.id,
      object: 'payment',
      amount: Number(row.amount),
      currency: row.currency,
      description: row.description,
      status: row.status,
      created: row.created_at.toISOString(),
    }),
  );
}

function json(status: number, body: Buffer, reference?: string): WorkResult {
  return { status, contentType: JSON_TYPE, body, reference };
}

function problem(status: number, slug: string, title: string): WorkResult {
  return {
    status,
    contentType: 'application/problem+json',
    body: Buffer.from(JSON.stringify({ type: `urn:retrysafe:problem:${slug}`, title, status })),
  };
}

/** Runs inside the claim's transaction (transactional mode). */
export async function createPayment(db: Queryable, principalId: string, input: PaymentInput): Promise<WorkResult> {
  const result = await db.query<PaymentRow>({
    name: 'demo_create_payment',
    text: `INSERT INTO payments (id, principal_id, amount, currency, description, status)
           VALUES ($1, $2, $3, $4, $5, 'succeeded')
           RETURNING id, amount, currency, description, status, created_at`,
    values: [newId('pay'), principalId, input.amount, input.currency, input.description ?? null],
  });
  const row = result.rows[0];
  if (!row) throw new Error('payment insert returned no row');
  return json(201, paymentBody(row), row.id);
}

/** Re-derives a payment response from its id (the reference stored for bodies over the cap). */
export async function paymentResponse(db: Queryable, paymentId: string): Promise<Buffer> {
  const result = await db.query<PaymentRow>({
    name: 'demo_read_payment',
    text: 'SELECT id, amount, currency, description, status, created_at FROM payments WHERE id = $1',
    values: [paymentId],
  });
  const row = result.rows[0];
  if (!row) throw new Error(`referenced payment ${paymentId} no longer exists`);
  return paymentBody(row);
}

interface RefundRow {
  id: string;
  payment_id: string;
  amount: string;
  status: string;
  processor_reference: string;
  created_at: Date;
}

function refundBody(row: RefundRow): Buffer {
  return Buffer.from(
    JSON.stringify({
      id: row.id,
      object: 'refund',
      payment: row.payment_id,
      amount: Number(row.amount),
      status: row.status,
      processorReference: row.processor_reference,
      created: row.created_at.toISOString(),
    }),
  );
}

/**
 * The processor reference of a refund: derived from the principal and the idempotency key, so
 * every attempt of one request (a retry after a lost answer, a takeover after a lease ran out)
 * asks the processor for the same refund, and records it at most once.
 */
export function refundReference(principalId: string, idempotencyKey: string): string {
  return `re_${createHash('sha256').update(principalId).update('\0').update(idempotencyKey).digest('hex').slice(0, 32)}`;
}

const REFUND_COLUMNS = 'id, payment_id, amount, status, processor_reference, created_at';

/**
 * Claim-first: the claim is already committed. Checks the payment, calls the external
 * processor (no transaction is open meanwhile), then records the refund in a short
 * transaction that locks the payment so concurrent refunds cannot exceed it. An earlier
 * attempt of the same request that already recorded its refund (its answer was lost to a
 * crash or a database restart before the key completed) is answered from that row.
 */
export async function createRefund(
  db: { connect(): Promise<Queryable & { release(error?: Error): void }> },
  processor: FakeProcessor,
  principalId: string,
  input: RefundInput,
  reference: string,
): Promise<WorkResult> {
  const client = await db.connect();
  const held: HeldConnection = { client };
  try {
    const payment = await client.query<{ amount: string; refunded: string }>({
      name: 'demo_refundable',
      text: `SELECT p.amount, coalesce((SELECT sum(r.amount) FROM refunds r WHERE r.payment_id = p.id), 0) AS refunded
             FROM payments p WHERE p.id = $1 AND p.principal_id = $2`,
      values: [input.payment, principalId],
    });
    const found = payment.rows[0];
    // Another principal's payment is indistinguishable from a missing one.
    if (!found) return problem(404, 'payment-not-found', 'No such payment');
    const recorded = await recordedRefund(client, input.payment, reference);
    if (recorded) return json(201, refundBody(recorded), recorded.id);
    if (Number(found.refunded) + input.amount > Number(found.amount)) {
      return problem(400, 'refund-exceeds-payment', 'The refund would exceed the amount of the payment');
    }
    let processorReference: string;
    try {
      processorReference = await processor.refund(reference);
    } catch (error) {
      if (error instanceof ProcessorUnavailableError) return problem(502, 'processor-unavailable', error.message);
      throw error;
    }
    return await transactionOn(held, async (tx) => {
      const locked = await tx.query<{ amount: string; refunded: string }>({
        name: 'demo_refund_lock',
        text: `SELECT p.amount, coalesce((SELECT sum(r.amount) FROM refunds r WHERE r.payment_id = p.id), 0) AS refunded
               FROM payments p WHERE p.id = $1 AND p.principal_id = $2 FOR UPDATE OF p`,
        values: [input.payment, principalId],
      });
      // Under the payment's lock: a concurrent attempt of this request may have recorded it meanwhile.
      const already = await recordedRefund(tx, input.payment, processorReference);
      if (already) return json(201, refundBody(already), already.id);
      const current = locked.rows[0];
      if (!current || Number(current.refunded) + input.amount > Number(current.amount)) {
        return problem(400, 'refund-exceeds-payment', 'The refund would exceed the amount of the payment');
      }
      const inserted = await tx.query<RefundRow>({
        name: 'demo_create_refund',
        text: `INSERT INTO refunds (id, principal_id, payment_id, amount, status, processor_reference)
               VALUES ($1, $2, $3, $4, 'succeeded', $5)
               RETURNING ${REFUND_COLUMNS}`,
        values: [newId('re'), principalId, input.payment, input.amount, processorReference],
      });
      const row = inserted.rows[0];
      if (!row) throw new Error('refund insert returned no row');
      return json(201, refundBody(row), row.id);
    });
  } finally {
    client.release(held.broken);
  }
}

/** The refund of this payment recorded under a processor reference, if any (refunds_payment_idx serves it). */
async function recordedRefund(db: Pick<Queryable, 'query'>, paymentId: string, reference: string): Promise<RefundRow | undefined> {
  const result = await db.query<RefundRow>({
    name: 'demo_recorded_refund',
    text: `SELECT ${REFUND_COLUMNS} FROM refunds WHERE payment_id = $1 AND processor_reference = $2 ORDER BY created_at LIMIT 1`,
    values: [paymentId, reference],
  });
  return result.rows[0];
}

/** Re-derives a refund response from its id. */
export async function refundResponse(db: Queryable, refundId: string): Promise<Buffer> {
  const result = await db.query<RefundRow>({
    name: 'demo_read_refund',
    text: 'SELECT id, payment_id, amount, status, processor_reference, created_at FROM refunds WHERE id = $1',
    values: [refundId],
  });
  const row = result.rows[0];
  if (!row) throw new Error(`referenced refund ${refundId} no longer exists`);
  return refundBody(row);
}
