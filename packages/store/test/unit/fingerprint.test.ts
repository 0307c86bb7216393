import { createHmac, randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { UncanonicalRequestError } from '@retrysafe/store';
import { canonicalBody, fingerprint } from '@retrysafe/store';

const secret = randomBytes(32);
const print = (body: unknown, endpoint = '/api/v1/payments', method = 'POST') => fingerprint(secret, { method, endpoint, body }).toString('hex');

function shuffleKeys(value: unknown, seed: number): unknown {
  if (Array.isArray(value)) return value.map((item, index) => shuffleKeys(item, seed + index));
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value);
    entries.sort((a, b) => ((a[0].length * 31 + seed) % 7) - ((b[0].length * 31 + seed) % 7) || (seed % 2 ? 1 : -1));
    return Object.fromEntries(entries.map(([key, item]) => [key, shuffleKeys(item, seed + 1)]));
  }
  return value;
}

describe('fingerprint', () => {
  it('does not depend on key order or whitespace', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.integer(), (value, seed) => {
        const reordered: unknown = JSON.parse(JSON.stringify(shuffleKeys(value, seed), null, seed % 3));
        expect(print(reordered)).toBe(print(value));
      }),
    );
  });

  it('changes with any value, the endpoint, the method and the secret', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.jsonValue(), (a, b) => {
        // Two bodies share a fingerprint exactly when their canonical JSON is the same.
        expect(print(a) === print(b)).toBe(canonicalBody(a) === canonicalBody(b));
      }),
    );
    const body = { amount: 1 };
    expect(print(body, '/api/v1/refunds')).not.toBe(print(body));
    expect(print(body, '/api/v1/payments', 'PUT')).not.toBe(print(body));
    expect(fingerprint(randomBytes(32), { method: 'POST', endpoint: '/api/v1/payments', body }).toString('hex')).not.toBe(print(body));
    expect(print({ amount: 1, note: 'a' })).not.toBe(print({ amount: 1, note: 'b' }));
  });

  it('is 32 bytes', () => {
    expect(fingerprint(secret, { method: 'POST', endpoint: 'x', body: {} })).toHaveLength(32);
  });

  it('refuses what has no canonical JSON form (a lone surrogate)', () => {
    expect(() => print(JSON.parse('{"a": "\\ud800"}'))).toThrow(UncanonicalRequestError);
  });
});

describe('fingerprint stream', () => {
  it('is HMAC-SHA256 of each field as a 4-byte big-endian length and its UTF-8 bytes (keys stored before a release still match after it)', () => {
    const secret = Buffer.alloc(32, 7);
    const fields = ['POST', 'POST /api/v1/payments', canonicalBody({ b: 'é', a: 1 })];
    const expected = createHmac('sha256', secret);
    for (const field of fields) {
      const bytes = Buffer.from(field, 'utf8');
      const length = Buffer.alloc(4);
      length.writeUInt32BE(bytes.length);
      expected.update(length).update(bytes);
    }
    expect(fingerprint(secret, { method: 'post', endpoint: 'POST /api/v1/payments', body: { a: 1, b: 'é' } }).toString('hex')).toBe(expected.digest('hex'));
  });
});

describe('canonical JSON', () => {
  it('is RFC 8785 (the example of its section 3.2.2), so fingerprints do not move with the library', () => {
    const input = JSON.parse('{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/","literals":[null,true,false]}') as unknown;
    expect(canonicalBody(input)).toBe('{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}');
  });
});

describe('fingerprint known answers', () => {
  // Computed by the release before the request path's CPU work (issue #12): stored fingerprints of
  // existing keys must keep matching, so these bytes never change.
  const secret = Buffer.from('retrysafe known-answer secret, 3', 'utf8');
  it.each([
    ['POST', 'POST /api/v1/payments', { amount: 1250, currency: 'EUR', description: 'Order 1234, two items' }, 'd02311f3dd79139d9003d3340470b4640b3656cf01e14f94383409a532bc77c9'],
    ['post', 'POST /orders', { sku: 'é-€-😀', quantity: 3, nested: { z: [1, 2.5, null, true], a: 'x' } }, 'fe28e0534cfc96eb5175ed92b450faa00d330d9cdb74e888291a4d46d09466a0'],
    ['PUT', 'intent', [], '9a7a588ee3e94ff3a3062a58bca1fb0031ec8018f53ec8d1c226c4d70ae02421'],
  ] as const)('%s %s', (method, endpoint, body, expected) => {
    expect(secret).toHaveLength(32);
    expect(fingerprint(secret, { method, endpoint, body }).toString('hex')).toBe(expected);
  });
});
