// The principals' top-K summary (Misra-Gries) against exact counts: on a skewed stream every
// estimate is a lower bound short by at most N/(k+1), every principal above that is kept, and
// merged summaries (instances, scopes, hours) keep the bound over the merged stream.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ALL, mergeHeavyHitters, MisraGries, principalRows } from '@retrysafe/store';
import { mulberry32 } from '../helpers/flow-events';

/** A Zipf-like stream over `principals` ids: principal i with weight 1/(i+1)^s. */
function skewedStream(seed: number, length: number, principals: number, s = 1.1): string[] {
  const random = mulberry32(seed);
  const weights = Array.from({ length: principals }, (_, i) => 1 / (i + 1) ** s);
  const cumulative: number[] = [];
  let sum = 0;
  for (const weight of weights) cumulative.push((sum += weight));
  const stream: string[] = [];
  for (let n = 0; n < length; n += 1) {
    const target = random() * sum;
    let lo = 0;
    let hi = cumulative.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((cumulative[mid] ?? 0) < target) lo = mid + 1;
      else hi = mid;
    }
    stream.push(`p${lo}`);
  }
  return stream;
}

function exact(stream: string[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const item of stream) counts.set(item, (counts.get(item) ?? 0) + 1);
  return counts;
}

function expectWithinBound(estimate: (item: string) => number, truth: Map<string, number>, bound: number): void {
  for (const [item, count] of truth) {
    const estimated = estimate(item);
    expect(estimated).toBeLessThanOrEqual(count);
    expect(count - estimated).toBeLessThanOrEqual(bound + 1e-9);
    if (count > bound) expect(estimated).toBeGreaterThan(0);
  }
}

describe('Misra-Gries principal summary', () => {
  it('keeps a skewed stream of 5,000 principals within N/(k+1) of the exact counts, in k counters', () => {
    const stream = skewedStream(7, 100_000, 5_000);
    const summary = new MisraGries(20);
    for (const item of stream) summary.add(item);
    const truth = exact(stream);
    expect(summary.size).toBeLessThanOrEqual(20);
    expect(summary.total).toBe(100_000);
    expect(summary.errorBound).toBeCloseTo(100_000 / 21);
    expectWithinBound((item) => summary.estimate(item), truth, summary.errorBound);
    // The heaviest principal comes first, as in the truth.
    const heaviest = [...truth].sort((a, b) => b[1] - a[1])[0]?.[0];
    expect(summary.entries()[0]?.item).toBe(heaviest);
  });

  it('holds the bound for any stream and k (property)', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 30 }), { maxLength: 400 }), fc.integer({ min: 1, max: 12 }), (ids, k) => {
        const stream = ids.map((id) => `p${id}`);
        const summary = new MisraGries(k);
        for (const item of stream) summary.add(item);
        expect(summary.size).toBeLessThanOrEqual(k);
        expectWithinBound((item) => summary.estimate(item), exact(stream), stream.length / (k + 1));
      }),
    );
  });

  it('merges per-instance summaries (summed, or merged down to k) within N/(k+1) of the whole stream', () => {
    const parts = [skewedStream(1, 30_000, 5_000), skewedStream(2, 20_000, 5_000, 1.3), skewedStream(3, 10_000, 300)];
    const summaries = parts.map((part) => {
      const summary = new MisraGries(20);
      for (const item of part) summary.add(item);
      return summary;
    });
    const truth = exact(parts.flat());
    const bound = 60_000 / 21;
    // Summed as the flush stores them (rows added across instances): each part's error adds up.
    expectWithinBound((item) => summaries.reduce((sum, summary) => sum + summary.estimate(item), 0), truth, bound);
    // Merged down to k counters (the '*' rows and the hour roll-up).
    const merged = mergeHeavyHitters(
      summaries.map((summary) => ({ entries: summary.entries(), total: summary.total })),
      20,
    );
    expect(merged.entries.length).toBeLessThanOrEqual(20);
    expect(merged.total).toBe(60_000);
    const estimates = new Map(merged.entries.map((entry) => [entry.item, entry.count]));
    expectWithinBound((item) => estimates.get(item) ?? 0, truth, bound);
  });

  it('fails the bound check when an estimate is off (the check can fail)', () => {
    const truth = new Map([['a', 100]]);
    expect(() => expectWithinBound(() => 50, truth, 10)).toThrow();
    expect(() => expectWithinBound(() => 101, truth, 10)).toThrow();
  });

  it("writes each scope's counters, each service's merged over scopes ('*') and the store's ('*', '*')", () => {
    const minute = Date.UTC(2026, 0, 1);
    const cell = (service: string, scope: string, items: string[]) => {
      const summary = new MisraGries(2);
      for (const item of items) summary.add(item);
      return { minute, service, scope, outcome: 'conflict' as const, summary };
    };
    const rows = principalRows(
      [cell('demo', 'POST /a', ['x', 'x', 'x', 'y']), cell('demo', 'POST /b', ['x', 'z', 'z']), cell('orders', 'POST /o', ['w', 'w', 'w', 'w', 'w'])],
      2,
    );
    const of = (service: string, scope: string) =>
      Object.fromEntries(rows.filter((row) => row.service === service && row.scope === scope).map((row) => [row.principalId, row.count]));
    expect(of('demo', 'POST /a')).toEqual({ x: 3, y: 1 });
    expect(of('demo', 'POST /b')).toEqual({ x: 1, z: 2 });
    // x 4, z 2, y 1: the third largest (1) comes off each of the top two.
    expect(of('demo', ALL)).toEqual({ x: 3, z: 1 });
    // w 5, x 3, z 1: minus 1.
    expect(of(ALL, ALL)).toEqual({ w: 4, x: 2 });
  });
});
