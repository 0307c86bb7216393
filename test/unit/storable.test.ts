// Every schema at a trust boundary refuses what Postgres cannot store, with a 400's issue naming
// the field, instead of letting the statement fail (a 500).
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { auditQuerySchema } from '../../server/audit/query';
import { operatorChangeSchema, newOperatorSchema } from '../../server/auth/operators';
import { paymentInput } from '../../server/demo/payments';
import { keyListSchema, keyLookupSchema, staleReleaseSchema } from '../../server/idempotency/key-metadata';
import { overviewQuery } from '../../server/metrics/overview';
import { isStorableText, storableInstant, UNSTORABLE_TEXT } from '../../server/storable';

const principalId = randomUUID();

describe('storable text', () => {
  it.each([
    ['a NUL character', 'a\u0000b', false],
    ['a lone high surrogate', 'a\ud800b', false],
    ['a lone low surrogate', 'a\udc00b', false],
    ['a high surrogate at the end', 'ab\ud83d', false],
    ['a surrogate pair (an emoji)', 'a\ud83d\ude00b', true],
    ['plain text with accents', 'Zahlung für Bestellung 42', true],
  ])('%s', (_name, value, storable) => {
    expect(isStorableText(value)).toBe(storable);
  });

  it('refuses year 0 and takes years 0001 to 9999', () => {
    expect(storableInstant().safeParse('0000-01-01T00:00:00Z').success).toBe(false);
    expect(storableInstant().safeParse('0001-01-01T00:00:00Z').success).toBe(true);
    expect(storableInstant().safeParse('9999-12-31T23:59:59+01:00').success).toBe(true);
  });

  const cases: [string, z.ZodType, Record<string, unknown>, string][] = [
    ['payment description', paymentInput, { amount: 100, currency: 'EUR', description: 'x\u0000' }, 'description'],
    ['key lookup reason', keyLookupSchema, { principalId, key: 'k', reason: 'ticket \u0000' }, 'reason'],
    ['key list scope', keyListSchema, { principalId, reason: 'ticket 1', scope: 'POST \u0000', limit: 10 }, 'scope'],
    ['key list cursor', keyListSchema, { principalId, reason: 'ticket 1', limit: 10, after: { createdAtMicros: '1', service: 'demo', scope: 'POST /x', key: 'k\u0000' } }, 'after.key'],
    ['stale release scope', staleReleaseSchema, { principalId, service: 'demo', scope: '\u0000', key: 'k', reason: 'ticket 1' }, 'scope'],
    ['audit actor', auditQuerySchema, { actor: 'a\u0000' }, 'actor'],
    ['audit from', auditQuerySchema, { from: '0000-01-01T00:00:00Z' }, 'from'],
    ['overview scope', overviewQuery, { range: '1h', scope: '\ud800' }, 'scope'],
    ['operator name', newOperatorSchema, { email: 'a@example.com', name: 'A\u0000', role: 'viewer', password: 'correct horse battery' }, 'name'],
    ['operator change reason', operatorChangeSchema, { role: 'viewer', reason: 'why\u0000' }, 'reason'],
  ];
  it.each(cases)('%s: a 400 issue naming the field', (_name, schema, input, path) => {
    const parsed = schema.safeParse(input);
    expect(parsed.success).toBe(false);
    // Only the unstorable field is wrong, so it is the one issue.
    expect(parsed.error?.issues.map((issue) => [issue.path.join('.'), issue.message])).toEqual([[path, path === 'from' ? 'must be a date from year 0001 on' : UNSTORABLE_TEXT]]);
  });

  it('says why', () => {
    expect(keyLookupSchema.safeParse({ principalId, key: 'k', reason: 'ticket \u0000' }).error?.issues[0]?.message).toBe(UNSTORABLE_TEXT);
  });
});
