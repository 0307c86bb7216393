// A refund's processor reference comes from the principal and the idempotency key, so a second
// attempt of the same request (a takeover after the first one recorded its refund and died
// before completing the key) answers from the recorded refund instead of refunding again.
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers/database';
import { createDemoHarness, post } from '../helpers/demo';
import { createRefund, refundReference } from '../../server/demo/payments';
import { FakeProcessor } from '../../server/demo/processor';

describe('the refund processor reference', () => {
  const db = useTestDatabase();

  it('is the same for every attempt of one request and differs by key and principal', () => {
    expect(refundReference('p1', 'key-1')).toBe(refundReference('p1', 'key-1'));
    expect(refundReference('p1', 'key-1')).not.toBe(refundReference('p1', 'key-2'));
    expect(refundReference('p1', 'key-1')).not.toBe(refundReference('p2', 'key-1'));
  });

  it('makes a second run of the same refund answer the first one, byte for byte, with one refund row', async () => {
    const demo = createDemoHarness(db.pool);
    const tenant = await demo.tenant();
    const payment = await demo.api.payments(post('/api/v1/payments', { apiKey: tenant.apiKey, key: 'pay-for-refund', body: { amount: 1_000, currency: 'EUR' } }));
    const { id } = (await payment.json()) as { id: string };
    const processor = new FakeProcessor({ latencyMs: 0, failureRate: 0 });
    const reference = refundReference(tenant.principalId, 'refund-once');
    const first = await createRefund(db.pool, processor, tenant.principalId, { payment: id, amount: 400 }, reference);
    const second = await createRefund(db.pool, processor, tenant.principalId, { payment: id, amount: 400 }, reference);
    expect(first.status).toBe(201);
    expect(second.status).toBe(201);
    expect(second.body.equals(first.body)).toBe(true);
    const { rows } = await db.pool.query<{ n: string }>('SELECT count(*) AS n FROM refunds WHERE payment_id = $1', [id]);
    expect(Number(rows[0]?.n)).toBe(1);
    // Another request (another key) is another refund.
    const other = await createRefund(db.pool, processor, tenant.principalId, { payment: id, amount: 400 }, refundReference(tenant.principalId, 'refund-two'));
    expect(other.status).toBe(201);
    expect(other.body.equals(first.body)).toBe(false);
  });
});
