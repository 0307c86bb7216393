// How long the Postgres key table keeps a row past its expiry when its cleanup keeps up, which the
// monitoring's baseline, cleanup lag and capacity forecast must allow for. The plain layout's
// sweeper deletes a row within a sweep of its expiry. The partitioned layout drops a partition
// whole once its range (of expires_at) has ended, so a row stays until then: up to one partition
// width (a day) past its expiry. Counted from each row's own expiry, the cleanup-lag alert (an
// hour) fired most of every day in that layout and the rows-over-baseline one every evening.
// Except a key promised less than a partition's width: the sweeper deletes it within a sweep of
// its expiry, by a walk of the expiry index (server/retention/sweeper.ts), as the plain layout's.
import type { Queryable } from '@retrysafe/store/postgres';
import { EXPIRY_INDEX_PREDICATE } from '@retrysafe/store/index-predicates';
import { listPartitions, PARTITION_SECONDS, SHORT_POLICY_CONDITION } from '../retention/partitions';

export interface KeyTableExpiry {
  layout: 'plain' | 'partitioned';
  /**
   * The rows a store whose cleanup keeps up holds are those expiring from here on: now in the
   * plain layout; in the partitioned one, the start of the partition now falls in (every
   * partition before it has ended, so it is due to be dropped), or of one that ended less than
   * ENDED_PARTITION_GRACE_SECONDS ago and is still attached (its drop comes with the next sweep;
   * a drop later than that is the cleanup lag's to report, not the baseline's).
   */
  keptFrom: Date;
  /** How long past its expiry such a store may keep a row: the partitions' width (the widest); 0 in the plain layout. */
  keptPastExpirySeconds: number;
  /** The partitioned layout: the earliest end of a partition still attached (null: none, or the plain layout). */
  firstPartitionEnd: Date | null;
  /**
   * The partitioned layout: a scope whose retention is shorter than this has its keys deleted
   * within a sweep of their expiry, as in the plain layout (kept from now, not kept past expiry).
   * Null in the plain layout, where that is every scope.
   */
  sweptBelowSeconds: number | null;
  /** The database's now(), which the other figures are relative to. */
  now: Date;
}

/** How long after its end an attached partition still counts as kept on time: the cleanup-lag alert's default threshold. */
export const ENDED_PARTITION_GRACE_SECONDS = 3_600;

/**
 * Catalog only: the key table's kind, and its partitions' bounds as the sweeper reads them
 * (listPartitions: pg_inherits of the parent, a few rows).
 */
export async function readKeyTableExpiry(db: Queryable, graceSeconds = ENDED_PARTITION_GRACE_SECONDS): Promise<KeyTableExpiry> {
  const [{ rows }, partitions] = await Promise.all([
    db.query<{ partitioned: boolean; now: Date }>({
      name: 'metrics_key_table_kind',
      text: `SELECT relkind = 'p' AS partitioned, now() AS now FROM pg_class WHERE oid = 'idempotency_keys'::regclass`,
    }),
    listPartitions(db),
  ]);
  const row = rows[0];
  if (!row) throw new Error('the key table kind query returned no row');
  const now = row.now.getTime();
  if (!row.partitioned) return { layout: 'plain', keptFrom: row.now, keptPastExpirySeconds: 0, firstPartitionEnd: null, sweptBelowSeconds: null, now: row.now };
  // No partition holds now (the sweeper has not made it): claims fail, and nothing is kept yet.
  const kept = partitions.filter((p) => p.lowerBound.getTime() <= now && p.upperBound.getTime() > now - graceSeconds * 1000);
  const earliest = (dates: Date[]) => (dates.length === 0 ? null : new Date(Math.min(...dates.map((date) => date.getTime()))));
  return {
    layout: 'partitioned',
    keptFrom: earliest(kept.map((p) => p.lowerBound)) ?? row.now,
    keptPastExpirySeconds: Math.max(0, ...partitions.map((p) => (p.upperBound.getTime() - p.lowerBound.getTime()) / 1000)),
    firstPartitionEnd: earliest(partitions.map((p) => p.upperBound)),
    sweptBelowSeconds: PARTITION_SECONDS,
    now: row.now,
  };
}

/**
 * The oldest expired entry of the expiry index after the sweeper's last walk ended (the latest
 * run that walked, by its partial index; from the start where none has), one index entry, read
 * only where a policy promises less than a partition (else nothing is walked for, and no lag).
 */
const WALK_LAG_SQL = `SELECT CASE WHEN ${SHORT_POLICY_CONDITION} THEN (
    SELECT extract(epoch FROM now() - expires_at)::float8 FROM idempotency_keys
    WHERE expires_at > coalesce((SELECT swept_through FROM sweep_runs WHERE swept_through IS NOT NULL ORDER BY id DESC LIMIT 1), '-infinity')
      AND expires_at < now() AND ${EXPIRY_INDEX_PREDICATE}
    ORDER BY expires_at LIMIT 1) END AS lag`;

/** The walk-lag statement's text, for the test that proves its plan. */
export const walkLagText = WALK_LAG_SQL;

/**
 * The partitioned layout, where a policy promises less than a partition: how long ago the oldest
 * expiry the sweeper's walk has not yet passed was, seconds (0: none, or nothing to walk for).
 * Read by the cleanup lag only (readStoreFigures), not with the layout, whose other readers (the
 * baseline, the capacity forecast) do not use it.
 */
export async function readWalkLagSeconds(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ lag: number | null }>({ name: 'metrics_short_walk_lag', text: WALK_LAG_SQL, values: [PARTITION_SECONDS] });
  return Math.max(0, rows[0]?.lag ?? 0);
}

/**
 * How far behind the cleanup is, in seconds: the oldest row's time past its expiry in the plain
 * layout; in the partitioned one, the time since the first attached partition ended (its rows,
 * all expired, are due to be dropped; a row promised a day or more, past its expiry in a partition
 * that has not ended, is on time), or the sweeper's walk of short promises behind, the longer.
 */
export function cleanupLagSeconds(expiry: KeyTableExpiry, oldestExpiryLagSeconds: number | null, walkLagSeconds: number): number {
  if (expiry.layout === 'plain') return Math.max(0, oldestExpiryLagSeconds ?? 0);
  const partitionLag = expiry.firstPartitionEnd === null ? 0 : (expiry.now.getTime() - expiry.firstPartitionEnd.getTime()) / 1000;
  return Math.max(0, partitionLag, walkLagSeconds);
}
