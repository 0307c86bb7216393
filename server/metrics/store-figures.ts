// Figures about the key store that are cheap on an 86-million-row table: catalog
// statistics and index-served extremes, never count(*) over the table.
import type { Queryable } from '@retrysafe/store/postgres';
import { EXPIRY_INDEX_PREDICATE } from '@retrysafe/store/index-predicates';
import { cleanupLagSeconds, readKeyTableExpiry, readWalkLagSeconds, type KeyTableExpiry } from './key-table-expiry';

export interface StoreFigures {
  /**
   * Estimated rows, as the planner estimates them: tuples per page from the last ANALYZE
   * times the current pages (summed over partitions); exact for a small, never-analysed table.
   */
  estimatedRows: number;
  /** Bytes of the table, its indexes and its TOAST data (summed over partitions). */
  tableBytes: number;
  indexBytes: number;
  toastBytes: number;
  /** Age of the row that expires first (normally the oldest), seconds; null when empty. Served by the expires_at index. */
  oldestRowAgeSeconds: number | null;
  /**
   * How far behind the cleanup is, seconds: the oldest surviving row's time past its expires_at
   * (0 when none has expired); in the partitioned layout, the time since the first attached
   * partition ended, or the sweeper's walk of short promises behind, the longer
   * (server/metrics/key-table-expiry.ts).
   */
  cleanupLagSeconds: number;
  /** In-progress claims whose lease has passed (partial index). */
  staleClaims: number;
  /** How long the oldest of them has been past its lease, seconds (0 when none); the same partial index. */
  oldestStaleSeconds: number;
}

/**
 * Catalog figures for idempotency_keys and its partitions (pg_class, pg_inherits); the oldest
 * expiry through the expires_at index (min); stale claims through the partial index.
 */
export async function readStoreFigures(db: Queryable, expiry?: KeyTableExpiry): Promise<StoreFigures> {
  expiry ??= await readKeyTableExpiry(db);
  const walkLag = expiry.layout === 'partitioned' ? await readWalkLagSeconds(db) : 0;
  const { rows } = await db.query<{
    estimated_rows: string;
    table_bytes: string;
    index_bytes: string;
    toast_bytes: string;
    oldest_expiry_lag: number | null;
    oldest_created_age: number | null;
    stale: number;
    oldest_stale: number | null;
    small_unanalysed: boolean;
  }>({
    name: 'metrics_store_figures',
    text: `
WITH rels AS (
  SELECT c.oid, c.reltuples, c.relpages, c.reltoastrelid FROM pg_class c WHERE c.oid = 'idempotency_keys'::regclass
  UNION ALL
  SELECT c.oid, c.reltuples, c.relpages, c.reltoastrelid FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
  WHERE i.inhparent = 'idempotency_keys'::regclass
), estimates AS (
  SELECT oid, reltoastrelid,
         CASE WHEN relpages > 0 AND reltuples >= 0
              THEN reltuples / relpages * (pg_relation_size(oid) / current_setting('block_size')::int)
              ELSE 0 END AS rows
  FROM rels
), oldest AS (
  SELECT expires_at, created_at FROM idempotency_keys WHERE ${EXPIRY_INDEX_PREDICATE} ORDER BY expires_at LIMIT 1
)
SELECT
  coalesce(sum(rows), 0)::bigint AS estimated_rows,
  coalesce(sum(pg_relation_size(oid)), 0)::bigint AS table_bytes,
  coalesce(sum(pg_indexes_size(oid)), 0)::bigint AS index_bytes,
  coalesce(sum(CASE WHEN reltoastrelid <> 0 THEN pg_total_relation_size(reltoastrelid) ELSE 0 END), 0)::bigint AS toast_bytes,
  (SELECT extract(epoch FROM now() - expires_at)::float8 FROM oldest) AS oldest_expiry_lag,
  (SELECT extract(epoch FROM now() - created_at)::float8 FROM oldest) AS oldest_created_age,
  (SELECT count(*)::int FROM idempotency_keys WHERE state = 'in_progress' AND lease_expires_at < now()) AS stale,
  (SELECT extract(epoch FROM now() - min(lease_expires_at))::float8 FROM idempotency_keys WHERE state = 'in_progress' AND lease_expires_at < now()) AS oldest_stale,
  -- Never analysed yet (a new install): the statistics say nothing, and the table is small.
  bool_and(rows = 0) AND coalesce(sum(pg_relation_size(oid)), 0) < 16 * 1024 * 1024 AS small_unanalysed
FROM estimates`,
  });
  const row = rows[0];
  let estimatedRows = Number(row?.estimated_rows ?? 0);
  if (row?.small_unanalysed) {
    const counted = await db.query<{ n: string }>('SELECT count(*) AS n FROM idempotency_keys');
    estimatedRows = Number(counted.rows[0]?.n ?? 0);
  }
  return {
    estimatedRows,
    tableBytes: Number(row?.table_bytes ?? 0),
    indexBytes: Number(row?.index_bytes ?? 0),
    toastBytes: Number(row?.toast_bytes ?? 0),
    oldestRowAgeSeconds: row?.oldest_created_age ?? null,
    cleanupLagSeconds: cleanupLagSeconds(expiry, row?.oldest_expiry_lag ?? null, walkLag),
    staleClaims: row?.stale ?? 0,
    oldestStaleSeconds: Math.max(0, row?.oldest_stale ?? 0),
  };
}
