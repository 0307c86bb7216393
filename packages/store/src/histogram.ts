// The claim-latency histogram's fixed, log-spaced buckets: every instance uses the same
// bounds, so histograms merge by adding counts, and percentiles come from merged counts.
// Bucket i holds latencies in (bound(i-1), bound(i)]; bounds grow by sqrt(2) from 0.1 ms,
// so a percentile read from the buckets is within one bucket (a factor of 1.41) of the truth.

export const BUCKET_COUNT = 36;
const FIRST_BOUND_MS = 0.1;

/** Upper bound of bucket i in milliseconds; the last bucket is unbounded. */
export function bucketUpperBound(index: number): number {
  return index >= BUCKET_COUNT - 1 ? Infinity : FIRST_BOUND_MS * 2 ** (index / 2);
}

export const BUCKET_BOUNDS_MS: readonly number[] = Array.from({ length: BUCKET_COUNT }, (_, index) => bucketUpperBound(index));

export function bucketOf(latencyMs: number): number {
  if (!(latencyMs > FIRST_BOUND_MS)) return 0;
  const index = Math.ceil(2 * Math.log2(latencyMs / FIRST_BOUND_MS) - 1e-9);
  return Math.min(BUCKET_COUNT - 1, index);
}

/**
 * The p-th percentile (0..100) of a histogram given as counts per bucket: the upper bound
 * of the bucket where the cumulative count reaches p% (the last finite bound for the
 * overflow bucket). NaN when empty.
 */
export function percentileOf(counts: ArrayLike<number>, p: number): number {
  let total = 0;
  for (let index = 0; index < counts.length; index += 1) total += counts[index] ?? 0;
  if (total === 0) return NaN;
  const rank = Math.max(1, Math.ceil((p / 100) * total));
  let cumulative = 0;
  for (let index = 0; index < counts.length; index += 1) {
    cumulative += counts[index] ?? 0;
    if (cumulative >= rank) return index >= BUCKET_COUNT - 1 ? bucketUpperBound(BUCKET_COUNT - 2) : bucketUpperBound(index);
  }
  return bucketUpperBound(BUCKET_COUNT - 2);
}
