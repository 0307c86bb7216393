// The Fetch adapter maps the store's typed errors to problem+json: a principal the adopter's
// authenticate returned that cannot be stored is a 400 naming it, not a 500.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { idempotent } from '@retrysafe/store/fetch';
import { useTestDatabase } from '../helpers/database';
import { createTestStore, jsonResult, testPolicy } from '../helpers/store';

describe('Fetch adapter', () => {
  const db = useTestDatabase();

  it('answers 400 problem+json when the principal cannot be a key scope', async () => {
    const { store } = createTestStore(db.pool);
    const handle = idempotent(store, {
      endpoint: 'POST /orders',
      method: 'POST',
      mode: 'claim-first',
      policy: testPolicy,
      maxBodyBytes: 1024,
      authenticate: () => Promise.resolve({ principalId: 'customer-42' }),
      input: z.object({ sku: z.string() }),
      work: () => Promise.resolve(jsonResult(201, { id: 'o1' })),
    });
    const response = await handle(
      new Request('http://test/orders', { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': 'k1' }, body: JSON.stringify({ sku: 'a' }) }),
    );
    expect(response.status).toBe(400);
    expect(response.headers.get('content-type')).toBe('application/problem+json');
    const problem = (await response.json()) as { type: string; detail: string };
    expect(problem.type).toBe('urn:retrysafe:problem:invalid-key-identity');
    expect(problem.detail).toBe('principalId must be a UUID');
  });
});
