// Hostile input, generated: whatever the header and body, the answer is a 4xx
// problem+json, never a 5xx, and nothing is stored for a request that was refused.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers/database';
import { createDemoHarness, post } from '../helpers/demo';

describe('demo API under generated malformed input', () => {
  const db = useTestDatabase();

  const keyHeader = fc.oneof(
    fc.constant(null),
    fc.string({ maxLength: 300 }),
    fc.string({ unit: fc.constantFrom(' ', '\t', '"', '\\', 'a', ',', '\u0080', '\u00ff'), maxLength: 20 }),
    fc.string({ minLength: 256, maxLength: 400, unit: fc.constantFrom('a', 'b') }),
  );
  const invalidBody = fc.oneof(
    fc.string({ maxLength: 200 }).filter((text) => {
      try {
        JSON.parse(text);
        return false;
      } catch {
        return true;
      }
    }),
    fc.jsonValue().map((value) => JSON.stringify(value)),
    fc.record({
      amount: fc.oneof(fc.double(), fc.integer({ max: 0 }), fc.string(), fc.constant(null), fc.constant(2 ** 60)),
      currency: fc.oneof(fc.string({ maxLength: 5 }), fc.constant('eur'), fc.constant('EURO')),
      description: fc.oneof(fc.string({ minLength: 501, maxLength: 600 }), fc.integer()),
      extra: fc.anything(),
    }, { requiredKeys: [] }).map((value) => JSON.stringify(value)),
    fc.constant('{"amount": 1, "currency": "EUR", "description": "\\ud800"}'),
    fc.constant('{"amount": 1, "currency": "EUR", "__proto__": {"x": 1}}'),
  );

  it('refuses every malformed Idempotency-Key with 400 problem+json and stores nothing', async () => {
    const demo = createDemoHarness(db.pool);
    const tenant = await demo.tenant();
    await fc.assert(
      fc.asyncProperty(keyHeader, async (key) => {
        let request: Request;
        try {
          request = post('/api/v1/payments', { apiKey: tenant.apiKey, key, body: { amount: 1, currency: 'EUR' } });
        } catch {
          return; // not a header value Fetch can send at all
        }
        const response = await demo.api.payments(request);
        const valid = response.status === 201;
        if (!valid) {
          expect(response.status).toBe(400);
          expect(response.headers.get('content-type')).toBe('application/problem+json');
          expect(await response.json()).toMatchObject({ status: 400 });
        }
      }),
      { numRuns: 300 },
    );
    // Only well-formed keys were ever claimed.
    const { rows } = await db.pool.query<{ key: string }>('SELECT key FROM idempotency_keys WHERE principal_id = $1', [tenant.principalId]);
    for (const { key } of rows) expect(key).toMatch(/^[\x21-\x7e]{1,255}$/);
  });

  it('refuses every malformed or invalid body with a 4xx problem+json and stores nothing', async () => {
    const demo = createDemoHarness(db.pool);
    const tenant = await demo.tenant();
    let n = 0;
    await fc.assert(
      fc.asyncProperty(invalidBody, async (raw) => {
        n += 1;
        const response = await demo.api.payments(post('/api/v1/payments', { apiKey: tenant.apiKey, key: `fuzz-${n}`, raw }));
        if (response.status === 201) return; // the generator produced a valid payment by chance
        expect(response.status).toBeGreaterThanOrEqual(400);
        expect(response.status).toBeLessThan(500);
        expect(response.headers.get('content-type')).toBe('application/problem+json');
        const { rowCount } = await db.pool.query('SELECT 1 FROM idempotency_keys WHERE principal_id = $1 AND key = $2', [
          tenant.principalId,
          `fuzz-${n}`,
        ]);
        expect(rowCount).toBe(0);
      }),
      { numRuns: 300 },
    );
  });
});
