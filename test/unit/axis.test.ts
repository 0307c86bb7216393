// The overview's round axis ticks: times on local-clock boundaries, values on 1-2-2.5-5 steps
// of their unit, from 0 to at least the largest value.
import { describe, expect, it } from 'vitest';
import { lonePoints, timeTicks, valueTicks } from '../../components/overview/axis';

describe('axis ticks', () => {
  it('puts time ticks on round local-clock boundaries inside the range', () => {
    const from = Date.parse('2026-12-04T13:07:00Z');
    const hour = timeTicks('1h', from, from + 3_600_000);
    expect(hour.every((t) => new Date(t).getMinutes() % 10 === 0 && new Date(t).getSeconds() === 0)).toBe(true);
    expect(hour).toHaveLength(6);
    expect(hour[0]).toBeGreaterThanOrEqual(from);
    const week = timeTicks('7d', from, from + 7 * 86_400_000);
    expect(week.every((t) => new Date(t).getHours() === 0 && new Date(t).getMinutes() === 0)).toBe(true);
    expect(week).toHaveLength(7);
    const month = timeTicks('30d', from, from + 30 * 86_400_000);
    expect(month.map((t) => new Date(t).getDate()).every((day) => [1, 6, 11, 16, 21, 26].includes(day))).toBe(true);
  });

  it('puts value ticks on round steps of the unit, reaching the largest value', () => {
    expect(valueTicks(47, 'number')).toEqual([0, 20, 40, 60]);
    expect(valueTicks(0.37, 'share')).toEqual([0, 0.1, 0.2, 0.3, 0.4]);
    expect(valueTicks(0, 'number')).toEqual([0, 0.25, 0.5, 0.75, 1]);
    // Things counted: whole-number ticks only.
    expect(valueTicks(1, 'count')).toEqual([0, 1]);
    expect(valueTicks(7, 'count')).toEqual([0, 2, 4, 6, 8]);
    // Bytes in powers of 1024: 40 KiB in steps of 10 KiB.
    expect(valueTicks(38 * 1024, 'bytes')).toEqual([0, 10_240, 20_480, 30_720, 40_960]);
    // Durations in s, min, h: 2.5 h in steps of 1 h.
    expect(valueTicks(9_000, 'seconds')).toEqual([0, 3_600, 7_200, 10_800]);
  });

  it('finds the points no segment touches: a value between gaps, at either end or alone', () => {
    expect([...lonePoints([null, null, 5])]).toEqual([2]);
    expect([...lonePoints([7])]).toEqual([0]);
    expect([...lonePoints([1, null, 2, 3, null, 0, undefined])]).toEqual([0, 5]);
    expect([...lonePoints([1, 2, 3])]).toEqual([]);
    expect([...lonePoints([null, null])]).toEqual([]);
  });
});
