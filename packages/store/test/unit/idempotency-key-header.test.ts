import { describe, expect, it } from 'vitest';
import { parseIdempotencyKey } from '@retrysafe/store';

describe('parseIdempotencyKey', () => {
  it.each([
    ['abc', 'abc'],
    ['"abc"', 'abc'],
    ['"a\\"b"', 'a"b'],
    ['"a\\\\b"', 'a\\b'],
    ['!~', '!~'],
    ['a"b', 'a"b'],
    ['k'.repeat(255), 'k'.repeat(255)],
  ])('accepts %j as %j', (header, key) => {
    expect(parseIdempotencyKey(header)).toEqual({ ok: true, key });
  });

  it.each([null, '', '""', '"a b"', 'a b', 'k'.repeat(256), '"a\\x"', '"a"b"', '"a\\"', 'tab\there', 'caf\u00e9'])('refuses %j', (header) => {
    expect(parseIdempotencyKey(header).ok).toBe(false);
  });
});
