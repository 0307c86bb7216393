import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BUCKET_COUNT, bucketOf, bucketUpperBound, percentileOf } from '@retrysafe/store';

describe('latency histogram buckets', () => {
  it('puts every latency in the bucket whose bounds hold it', () => {
    fc.assert(
      fc.property(fc.double({ min: 0.1000001, max: 20_000, noNaN: true }), (latency) => {
        const bucket = bucketOf(latency);
        expect(latency).toBeLessThanOrEqual(bucketUpperBound(bucket) * (1 + 1e-9));
        if (bucket > 0 && bucket < BUCKET_COUNT - 1) expect(latency).toBeGreaterThan(bucketUpperBound(bucket - 1) * (1 - 1e-9));
      }),
    );
    expect(bucketOf(0)).toBe(0);
    expect(bucketOf(1e9)).toBe(BUCKET_COUNT - 1);
  });

  it('reads percentiles from counts', () => {
    const counts = new Array<number>(BUCKET_COUNT).fill(0);
    counts[bucketOf(1)] = 90;
    counts[bucketOf(10)] = 9;
    counts[bucketOf(100)] = 1;
    expect(percentileOf(counts, 50)).toBe(bucketUpperBound(bucketOf(1)));
    expect(percentileOf(counts, 95)).toBe(bucketUpperBound(bucketOf(10)));
    expect(percentileOf(counts, 100)).toBe(bucketUpperBound(bucketOf(100)));
    expect(percentileOf(new Array<number>(BUCKET_COUNT).fill(0), 50)).toBeNaN();
  });
});
