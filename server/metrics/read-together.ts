// Independent reads of one dashboard answer, at once where that is possible.
import pg from 'pg';
import type { Queryable } from '@retrysafe/store/postgres';

type Reads = readonly (() => Promise<unknown>)[];
type Results<T extends Reads> = { -readonly [K in keyof T]: Awaited<ReturnType<T[K]>> };

/**
 * Runs independent reads at once when `db` is a pool (each on a connection of its own, so the
 * answer takes about as long as its slowest read rather than their sum), and one after another
 * on anything else: a single client runs one statement at a time anyway, and a transaction's
 * reads must stay on its connection. Results in the order of `reads`.
 */
export async function readTogether<const T extends Reads>(db: Queryable, reads: T): Promise<Results<T>> {
  if (db instanceof pg.Pool) return (await Promise.all(reads.map((read) => read()))) as Results<T>;
  const results: unknown[] = [];
  for (const read of reads) results.push(await read());
  return results as Results<T>;
}
