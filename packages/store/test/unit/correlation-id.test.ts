// Correlation ids are UUIDv7s: time first, so the correlation-id index takes each new claim at
// its right-hand edge (a random v4 id cost claims about 18% at 10 M keys), and each later id
// sorts after an earlier one as Postgres compares uuids (byte by byte).
import { afterEach, describe, expect, it, vi } from 'vitest';
import { newCorrelationId } from '@retrysafe/store';

describe('correlation ids', () => {
  it('are version 7 RFC 9562 UUIDs stamped with the current millisecond', () => {
    const before = Date.now();
    const id = newCorrelationId();
    const after = Date.now();
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    const stamped = Number.parseInt(id.replace(/-/g, '').slice(0, 12), 16);
    expect(stamped).toBeGreaterThanOrEqual(before);
    expect(stamped).toBeLessThanOrEqual(after);
  });

  it('increase, in the order they were made, within a millisecond too', () => {
    const ids = Array.from({ length: 5_000 }, () => newCorrelationId());
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.every((id, index) => index === 0 || id > (ids[index - 1] ?? ''))).toBe(true);
  });

  afterEach(() => vi.restoreAllMocks());

  it('still increase when a millisecond holds more than 4,096 of them, or the clock goes back', () => {
    const frozen = Date.now() + 60_000;
    const clock = vi.spyOn(Date, 'now').mockReturnValue(frozen);
    const ids = Array.from({ length: 5_000 }, () => newCorrelationId());
    clock.mockReturnValue(frozen - 5_000);
    ids.push(newCorrelationId());
    expect(ids.every((id, index) => index === 0 || id > (ids[index - 1] ?? ''))).toBe(true);
    const stampOf = (id: string) => Number.parseInt(id.replace(/-/g, '').slice(0, 12), 16);
    expect(stampOf(ids[0] ?? '')).toBe(frozen);
    expect(stampOf(ids.at(-1) ?? '')).toBe(frozen + 1);
    expect(ids.every((id) => /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(id))).toBe(true);
  });
});
