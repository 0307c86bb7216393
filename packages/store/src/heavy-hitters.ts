// A Misra-Gries heavy-hitters summary: at most k counters, whatever the number of distinct
// items. Each estimate is a lower bound of the item's true count, short by at most
// N/(k+1), N the weight added to the summary; every item whose true count exceeds N/(k+1)
// is among the counters. Summaries merge (add the counters, then subtract the (k+1)-th
// largest and keep the positive ones) with the same bound over the merged weight
// (Agarwal et al., "Mergeable summaries", 2012), so per-instance summaries can be merged
// across instances, scopes and time buckets and stay bounded.

export interface HeavyHitter {
  item: string;
  count: number;
}

export class MisraGries {
  private readonly counters = new Map<string, number>();
  /** The weight added so far (N). */
  total = 0;

  constructor(readonly k: number) {
    if (!Number.isInteger(k) || k < 1) throw new RangeError('k must be a positive integer');
  }

  add(item: string, weight = 1): void {
    this.total += weight;
    const current = this.counters.get(item);
    if (current !== undefined) {
      this.counters.set(item, current + weight);
      return;
    }
    if (this.counters.size < this.k) {
      this.counters.set(item, weight);
      return;
    }
    // Full: the new item and every counter lose the smallest of them (weight 1: one each).
    let cut = weight;
    for (const count of this.counters.values()) if (count < cut) cut = count;
    for (const [key, count] of this.counters) {
      if (count <= cut) this.counters.delete(key);
      else this.counters.set(key, count - cut);
    }
    if (weight > cut) this.counters.set(item, weight - cut);
  }

  /** The estimate (a lower bound; 0 for an item not tracked). */
  estimate(item: string): number {
    return this.counters.get(item) ?? 0;
  }

  /** The most an estimate falls short of the true count: N/(k+1). */
  get errorBound(): number {
    return this.total / (this.k + 1);
  }

  get size(): number {
    return this.counters.size;
  }

  /** The tracked items, largest first. */
  entries(): HeavyHitter[] {
    return [...this.counters].map(([item, count]) => ({ item, count })).sort((a, b) => b.count - a.count || (a.item < b.item ? -1 : 1));
  }
}

/**
 * Merges summaries (or plain counts with their total weight) into top-k counters: adds the
 * counters item by item, then subtracts the (k+1)-th largest and keeps what stays positive.
 */
export function mergeHeavyHitters(parts: Iterable<{ entries: Iterable<HeavyHitter>; total: number }>, k: number): { entries: HeavyHitter[]; total: number } {
  const sums = new Map<string, number>();
  let total = 0;
  for (const part of parts) {
    total += part.total;
    for (const { item, count } of part.entries) sums.set(item, (sums.get(item) ?? 0) + count);
  }
  const sorted = [...sums].map(([item, count]) => ({ item, count })).sort((a, b) => b.count - a.count || (a.item < b.item ? -1 : 1));
  if (sorted.length <= k) return { entries: sorted, total };
  const cut = sorted[k]?.count ?? 0;
  return { entries: sorted.slice(0, k).map((entry) => ({ item: entry.item, count: entry.count - cut })).filter((entry) => entry.count > 0), total };
}
