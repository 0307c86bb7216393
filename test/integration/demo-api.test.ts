// The protected demo API through its Fetch handlers: statuses, headers and problem
// bodies exactly as the contract says, on a real database.
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers/database';
import { createDemoHarness, post } from '../helpers/demo';

const PAYMENTS = '/api/v1/payments';
const REFUNDS = '/api/v1/refunds';

describe('demo payments API', () => {
  const db = useTestDatabase();

  const paymentsOf = async (principalId: string) =>
    Number((await db.pool.query<{ n: string }>('SELECT count(*) AS n FROM payments WHERE principal_id = $1', [principalId])).rows[0]?.n);

  it('creates a payment once and replays it byte for byte, with the original correlation id', async () => {
    const demo = createDemoHarness(db.pool);
    const tenant = await demo.tenant();
    const body = { amount: 1250, currency: 'EUR', description: 'order 17' };
    const first = await demo.api.payments(post(PAYMENTS, { apiKey: tenant.apiKey, key: 'order-17', body }));
    const firstBytes = Buffer.from(await first.arrayBuffer());
    expect(first.status).toBe(201);
    expect(first.headers.get('content-type')).toBe('application/json');
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const correlationId = first.headers.get('x-correlation-id');
    // A UUIDv7 (newCorrelationId), whatever path made the response.
    expect(correlationId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    const created = JSON.parse(firstBytes.toString()) as { id: string; object: string; amount: number };
    expect(created).toMatchObject({ object: 'payment', amount: 1250, currency: 'EUR' });
    expect(created.id).toMatch(/^pay_/);

    const reordered = '{ "description": "order 17",  "currency": "EUR", "amount": 1250 }';
    const replay = await demo.api.payments(post(PAYMENTS, { apiKey: tenant.apiKey, key: 'order-17', raw: reordered }));
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.headers.get('content-type')).toBe('application/json');
    expect(replay.headers.get('x-correlation-id')).toBe(correlationId);
    expect(Buffer.from(await replay.arrayBuffer()).equals(firstBytes)).toBe(true);
    expect(await paymentsOf(tenant.principalId)).toBe(1);

    const changed = await demo.api.payments(post(PAYMENTS, { apiKey: tenant.apiKey, key: 'order-17', body: { ...body, amount: 1251 } }));
    expect(changed.status).toBe(422);
    expect(changed.headers.get('content-type')).toBe('application/problem+json');
    expect(await changed.json()).toMatchObject({ status: 422, type: 'urn:retrysafe:problem:key-reused' });
  });

  it('keeps two tenants using the same key string apart', async () => {
    const demo = createDemoHarness(db.pool);
    const [a, b] = [await demo.tenant('a'), await demo.tenant('b')];
    const responseA = await demo.api.payments(post(PAYMENTS, { apiKey: a.apiKey, key: 'retry-1', body: { amount: 100, currency: 'USD' } }));
    const responseB = await demo.api.payments(post(PAYMENTS, { apiKey: b.apiKey, key: 'retry-1', body: { amount: 100, currency: 'USD' } }));
    expect([responseA.status, responseB.status]).toEqual([201, 201]);
    expect(responseB.headers.get('idempotent-replayed')).toBeNull();
    const [paymentA, paymentB] = [(await responseA.json()) as { id: string }, (await responseB.json()) as { id: string }];
    expect(paymentA.id).not.toBe(paymentB.id);
    expect([await paymentsOf(a.principalId), await paymentsOf(b.principalId)]).toEqual([1, 1]);
    // B refunding A's payment sees exactly what a missing payment looks like.
    const foreign = await demo.api.refunds(post(REFUNDS, { apiKey: b.apiKey, key: 'r-1', body: { payment: paymentA.id, amount: 1 } }));
    const missing = await demo.api.refunds(post(REFUNDS, { apiKey: b.apiKey, key: 'r-2', body: { payment: 'pay_0000', amount: 1 } }));
    expect(foreign.status).toBe(404);
    expect(await foreign.text()).toBe(await missing.text());
  });

  it('scopes keys by endpoint: one key on payments and on refunds is two operations', async () => {
    const demo = createDemoHarness(db.pool);
    const tenant = await demo.tenant();
    const payment = await demo.api.payments(post(PAYMENTS, { apiKey: tenant.apiKey, key: 'same', body: { amount: 500, currency: 'EUR' } }));
    const { id } = (await payment.json()) as { id: string };
    const refund = await demo.api.refunds(post(REFUNDS, { apiKey: tenant.apiKey, key: 'same', body: { payment: id, amount: 200 } }));
    expect(refund.status).toBe(201);
    expect(refund.headers.get('idempotent-replayed')).toBeNull();
    expect(await refund.json()).toMatchObject({ object: 'refund', payment: id, amount: 200 });
    const again = await demo.api.refunds(post(REFUNDS, { apiKey: tenant.apiKey, key: 'same', body: { payment: id, amount: 200 } }));
    expect(again.headers.get('idempotent-replayed')).toBe('true');
  });

  it('does not store a processor failure (502): the retry runs again and succeeds', async () => {
    const demo = createDemoHarness(db.pool);
    const tenant = await demo.tenant();
    const payment = await demo.api.payments(post(PAYMENTS, { apiKey: tenant.apiKey, key: 'p', body: { amount: 500, currency: 'EUR' } }));
    const { id } = (await payment.json()) as { id: string };
    demo.processor.failNext = true;
    const failed = await demo.api.refunds(post(REFUNDS, { apiKey: tenant.apiKey, key: 'r', body: { payment: id, amount: 100 } }));
    expect(failed.status).toBe(502);
    const retry = await demo.api.refunds(post(REFUNDS, { apiKey: tenant.apiKey, key: 'r', body: { payment: id, amount: 100 } }));
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    const { rows } = await db.pool.query('SELECT amount FROM refunds WHERE payment_id = $1', [id]);
    expect(rows).toEqual([{ amount: '100' }]); // bigint comes back as text
  });

  it('re-authorizes every request: a revoked key gets 401 and a lost permission 403, even for a completed key', async () => {
    const demo = createDemoHarness(db.pool);
    const tenant = await demo.tenant();
    const request = () => post(PAYMENTS, { apiKey: tenant.apiKey, key: 'k', body: { amount: 1, currency: 'EUR' } });
    expect((await demo.api.payments(request())).status).toBe(201);
    await db.pool.query("UPDATE tenants SET permissions = ARRAY['refunds:write'] WHERE id = $1", [tenant.principalId]);
    const forbidden = await demo.api.payments(request());
    expect(forbidden.status).toBe(403);
    expect(forbidden.headers.get('content-type')).toBe('application/problem+json');
    await db.pool.query('UPDATE tenants SET revoked_at = now() WHERE id = $1', [tenant.principalId]);
    expect((await demo.api.payments(request())).status).toBe(401);
    const anonymous = await demo.api.payments(post(PAYMENTS, { key: 'k', body: { amount: 1, currency: 'EUR' } }));
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('www-authenticate')).toBe('Bearer');
  });

  it.each([
    ['missing', null, 400],
    ['empty', '', 400],
    ['256 characters', 'k'.repeat(256), 400],
    ['a space', 'has space', 400],
    ['a non-ASCII character', 'k\u00e9y', 400],
    ['a bad escape in a quoted key', '"a\\b"', 400],
    ['255 characters', 'k'.repeat(255), 201],
    ['a structured-field string', '"quoted-key"', 201],
  ])('answers a key with %s with %i', async (_name, key, status) => {
    const demo = createDemoHarness(db.pool);
    const tenant = await demo.tenant();
    let request: Request;
    try {
      request = post(PAYMENTS, { apiKey: tenant.apiKey, key, body: { amount: 1, currency: 'EUR' } });
    } catch {
      // Fetch itself refuses some header values (non-Latin-1); no request can carry them.
      return;
    }
    const response = await demo.api.payments(request);
    expect(response.status).toBe(status);
    if (status >= 400) expect(response.headers.get('content-type')).toBe('application/problem+json');
  });

  it('treats a structured-field key and its bare form as the same key', async () => {
    const demo = createDemoHarness(db.pool);
    const tenant = await demo.tenant();
    const body = { amount: 9, currency: 'EUR' };
    await demo.api.payments(post(PAYMENTS, { apiKey: tenant.apiKey, key: '"abc"', body }));
    const bare = await demo.api.payments(post(PAYMENTS, { apiKey: tenant.apiKey, key: 'abc', body }));
    expect(bare.headers.get('idempotent-replayed')).toBe('true');
  });

  it('answers 429 with Retry-After over the live-key quota, and still replays existing keys', async () => {
    const { LiveKeyQuota } = await import('@retrysafe/store');
    const { DEMO_SERVICE, paymentsPolicy } = await import('../../server/demo/policies');
    const quota = new LiveKeyQuota(db.pool, { service: DEMO_SERVICE });
    const demo = createDemoHarness(db.pool, { quota, policyFor: () => ({ ...paymentsPolicy, liveKeyQuota: 2 }) });
    const tenant = await demo.tenant();
    const body = { amount: 5, currency: 'EUR' };
    for (const key of ['q-1', 'q-2']) expect((await demo.api.payments(post(PAYMENTS, { apiKey: tenant.apiKey, key, body }))).status).toBe(201);
    const refused = await demo.api.payments(post(PAYMENTS, { apiKey: tenant.apiKey, key: 'q-3', body }));
    expect(refused.status).toBe(429);
    expect(refused.headers.get('content-type')).toBe('application/problem+json');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    const replay = await demo.api.payments(post(PAYMENTS, { apiKey: tenant.apiKey, key: 'q-1', body }));
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    await quota.stop();
  });

  it('refuses a body over the limit with 413 and stores nothing', async () => {
    const demo = createDemoHarness(db.pool);
    const tenant = await demo.tenant();
    const response = await demo.api.payments(
      post(PAYMENTS, { apiKey: tenant.apiKey, key: 'big', body: { amount: 1, currency: 'EUR', description: 'x'.repeat(20_000) } }),
    );
    expect(response.status).toBe(413);
    expect(response.headers.get('content-type')).toBe('application/problem+json');
    const { rowCount } = await db.pool.query('SELECT 1 FROM idempotency_keys WHERE principal_id = $1', [tenant.principalId]);
    expect(rowCount).toBe(0);
  });

  it('answers text Postgres cannot store (a NUL, an unpaired surrogate) with a 400 naming the field, and stores nothing', async () => {
    const demo = createDemoHarness(db.pool);
    const tenant = await demo.tenant();
    for (const [key, description] of [['nul', 'order \u0000 17'], ['surrogate', 'order \ud800 17']]) {
      const response = await demo.api.payments(post(PAYMENTS, { apiKey: tenant.apiKey, key, body: { amount: 1, currency: 'EUR', description } }));
      expect(response.status).toBe(400);
      const problem = (await response.json()) as { errors: { path: string }[] };
      expect(problem.errors.map((error) => error.path)).toEqual(['description']);
    }
    const { rowCount } = await db.pool.query('SELECT 1 FROM idempotency_keys WHERE principal_id = $1', [tenant.principalId]);
    expect(rowCount).toBe(0);
  });
});
