// Capacity: the key table's unique index against the database's memory, the one figure the
// design lesson says decides when to partition or change store (claim p99 bends once the
// index's random inserts miss memory). Catalog reads (pg_class, pg_inherits, pg_index, sizes,
// pg_settings) and primary-key ranges of the metrics tables only: never a key, a fingerprint or
// a body, and never a scan of the key table.
import type { Queryable } from '@retrysafe/store/postgres';
import { readKeyTableExpiry } from './key-table-expiry';

/** Where the memory figure comes from: the operator's DATABASE_MEMORY_BYTES, else shared_buffers alone. */
/** Keys below which the bytes per key are not measured (the table's fixed pages would dominate). */
const MEASURABLE_ROWS = 10_000;

export type MemorySource = 'DATABASE_MEMORY_BYTES' | 'shared_buffers';

/** The key table's figures now (every partition's, in the partitioned layout), from the catalog. */
export interface IndexMemory {
  heapBytes: number;
  /** The unique key's index (principal_id, service, scope, key[, expires_at]): the one every claim inserts into. */
  uniqueIndexBytes: number;
  /** Every index of the key table. */
  allIndexBytes: number;
  /** Rows as the planner estimates them (catalog statistics; 0 before the first ANALYZE). */
  estimatedRows: number;
  sharedBuffersBytes: number;
  memoryBytes: number;
  memorySource: MemorySource;
}

/**
 * The key table's heap, unique-index and all-index bytes and its estimated rows, summed over
 * its partitions, and shared_buffers: catalog only (sizes are a stat() of each file).
 */
export async function readIndexMemory(db: Queryable, databaseMemoryBytes?: number): Promise<IndexMemory> {
  const { rows } = await db.query<{ heap_bytes: string; unique_index_bytes: string; all_index_bytes: string; estimated_rows: string; shared_buffers_bytes: string }>({
    name: 'metrics_capacity_catalog',
    text: `WITH rels AS (
             SELECT c.oid, c.reltuples, c.relpages FROM pg_class c WHERE c.oid = 'idempotency_keys'::regclass AND c.relkind = 'r'
             UNION ALL
             SELECT c.oid, c.reltuples, c.relpages FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'idempotency_keys'::regclass
           )
           SELECT coalesce(sum(pg_relation_size(r.oid)), 0)::bigint AS heap_bytes,
                  coalesce(sum((SELECT sum(pg_relation_size(x.indexrelid)) FROM pg_index x WHERE x.indrelid = r.oid AND x.indisunique)), 0)::bigint AS unique_index_bytes,
                  coalesce(sum(pg_indexes_size(r.oid)), 0)::bigint AS all_index_bytes,
                  coalesce(sum(CASE WHEN r.relpages > 0 AND r.reltuples >= 0
                                    THEN r.reltuples / r.relpages * (pg_relation_size(r.oid) / current_setting('block_size')::int) ELSE 0 END), 0)::bigint AS estimated_rows,
                  (SELECT setting::bigint * current_setting('block_size')::bigint FROM pg_settings WHERE name = 'shared_buffers') AS shared_buffers_bytes
           FROM rels r`,
  });
  const row = rows[0];
  const sharedBuffersBytes = Number(row?.shared_buffers_bytes ?? 0);
  return {
    heapBytes: Number(row?.heap_bytes ?? 0),
    uniqueIndexBytes: Number(row?.unique_index_bytes ?? 0),
    allIndexBytes: Number(row?.all_index_bytes ?? 0),
    estimatedRows: Number(row?.estimated_rows ?? 0),
    sharedBuffersBytes,
    memoryBytes: databaseMemoryBytes ?? sharedBuffersBytes,
    memorySource: databaseMemoryBytes === undefined ? 'shared_buffers' : 'DATABASE_MEMORY_BYTES',
  };
}

/** GET /api/admin/overview's `capacity`: the store's bytes against memory, and the steady state the current rate leads to. */
export interface Capacity {
  /** The key table's layout, and how long past its expiry it keeps a row when its cleanup keeps up (key-table-expiry.ts). */
  layout: 'plain' | 'partitioned';
  keptPastExpirySeconds: number;
  /** The key table's heap (every service's keys: they share it). */
  heapBytes: number;
  /** Its unique index. */
  indexBytes: number;
  /** DATABASE_MEMORY_BYTES, else shared_buffers. */
  memoryBytes: number;
  memorySource: MemorySource;
  sharedBuffersBytes: number;
  /** Estimated live rows (catalog statistics, else the last store sample's estimate). */
  rows: number;
  /** Measured heap and unique-index bytes per key; null before there are rows to measure. */
  bytesPerKey: number | null;
  indexBytesPerKey: number | null;
  /** New keys a second of the chosen service (every service when none), over the last hour of flow. */
  newKeysPerSecond: number;
  /**
   * At that rate, with each scope's retention: the rows a store that expires on time settles at;
   * in the partitioned layout, where a row stays until its partition ends, the peak (retention
   * plus the partition's width, a day), except where a scope's retention is shorter than a day
   * (the sweeper deletes its keys within a sweep of their expiry).
   */
  steadyStateRows: number;
  /** Their unique index at the measured bytes per key (null: nothing measured yet). */
  steadyStateIndexBytes: number | null;
  steadyStateBytes: number | null;
  /** The unique index over memory, now (1 = all of it). */
  indexShareOfMemory: number | null;
  /** When the unique index reaches memory at the last day's growth of the rows (null: it does not, at that trend or at the steady state). */
  outgrowsMemoryAt: string | null;
}

const TREND_HOURS = 24;

/**
 * The capacity figures for a choice of service: bytes from the catalog (readIndexMemory), the
 * new-key rate per scope from flow_counts_minute (a range of its primary key, which leads with
 * the minute), each scope's retention from endpoint_policies (as the baseline reads it, intent
 * scope taking the longest intent retention), and the trend from two store_stats samples
 * (primary-key probes: the first of the last day and the latest).
 */
export async function readCapacity(db: Queryable, options: { service?: string | undefined; databaseMemoryBytes?: number | undefined } = {}): Promise<Capacity> {
  const [memory, expiry] = await Promise.all([readIndexMemory(db, options.databaseMemoryBytes), readKeyTableExpiry(db)]);
  const [{ rows: rates }, { rows: trend }] = await Promise.all([
    db.query<{ new_keys: string; retention_seconds: number | null; window_seconds: number | null }>({
      name: 'metrics_capacity_rates',
      text: `WITH recent AS (
               SELECT service, scope, sum(count)::bigint AS new_keys, min(minute) AS since FROM flow_counts_minute
               WHERE minute >= now() - interval '1 hour' AND minute < 'infinity' AND outcome = 'new' AND ($1::text IS NULL OR service = $1)
               GROUP BY service, scope
             ), retention AS (
               SELECT service, endpoint AS scope, retention_seconds FROM endpoint_policies WHERE scope_mode = 'endpoint'
               UNION ALL
               SELECT service, 'intent', max(retention_seconds) FROM endpoint_policies WHERE scope_mode = 'intent' GROUP BY service
             )
             SELECT r.new_keys, p.retention_seconds,
                    -- The flow's span in the hour: a server up for ten minutes has ten minutes of it.
                    least(3600, greatest(60, extract(epoch FROM now() - (SELECT min(since) FROM recent))))::float8 AS window_seconds
             FROM recent r LEFT JOIN retention p ON p.service = r.service AND p.scope = r.scope`,
      values: [options.service ?? null],
    }),
    db.query<{ first_at: Date | null; first_rows: string | null; last_at: Date | null; last_rows: string | null }>({
      name: 'metrics_capacity_trend',
      text: `SELECT f.sampled_at AS first_at, f.estimated_rows AS first_rows, l.sampled_at AS last_at, l.estimated_rows AS last_rows
             FROM (SELECT sampled_at, estimated_rows FROM store_stats WHERE sampled_at >= now() - $1::int * interval '1 hour' ORDER BY sampled_at LIMIT 1) f
             FULL JOIN (SELECT sampled_at, estimated_rows FROM store_stats ORDER BY sampled_at DESC LIMIT 1) l ON true`,
      values: [TREND_HOURS],
    }),
  ]);
  const sample = trend[0];
  // A table never analysed yet has no statistics: the sampler's estimate (it counts a small one).
  const rows = memory.estimatedRows > 0 ? memory.estimatedRows : Number(sample?.last_rows ?? 0);
  // Below MEASURABLE_ROWS a table's pages are mostly fixed overhead (a fresh install's 5 keys
  // measured 11 KiB a key): no per-key figure, so no steady state in bytes extrapolated from it.
  const measurable = rows >= MEASURABLE_ROWS;
  const bytesPerKey = measurable ? (memory.heapBytes + memory.uniqueIndexBytes) / rows : null;
  const indexBytesPerKey = measurable ? memory.uniqueIndexBytes / rows : null;
  let newKeysPerSecond = 0;
  let steadyStateRows = 0;
  for (const rate of rates) {
    const perSecond = Number(rate.new_keys) / (rate.window_seconds ?? 3600);
    newKeysPerSecond += perSecond;
    // A partitioned store keeps a row until its partition ends (it peaks a partition's width
    // higher), except a row promised less than a partition, which the sweeper deletes on time.
    const retention = rate.retention_seconds ?? 0;
    // A scope without a policy is not known to be short: it is given the partition's width.
    const sweptOnTime = expiry.sweptBelowSeconds !== null && rate.retention_seconds !== null && retention < expiry.sweptBelowSeconds;
    steadyStateRows += perSecond * (retention + (sweptOnTime ? 0 : expiry.keptPastExpirySeconds));
  }
  steadyStateRows = Math.round(steadyStateRows);
  const steadyStateIndexBytes = indexBytesPerKey === null ? null : Math.round(steadyStateRows * indexBytesPerKey);
  const steadyStateBytes = bytesPerKey === null ? null : Math.round(steadyStateRows * bytesPerKey);

  let outgrowsMemoryAt: string | null = null;
  const firstAt = sample?.first_at ?? null;
  const lastAt = sample?.last_at ?? null;
  if (firstAt && lastAt && lastAt > firstAt && indexBytesPerKey !== null && memory.uniqueIndexBytes < memory.memoryBytes && (steadyStateIndexBytes === null || steadyStateIndexBytes > memory.memoryBytes)) {
    const seconds = (lastAt.getTime() - firstAt.getTime()) / 1000;
    const bytesPerSecond = ((Number(sample?.last_rows ?? 0) - Number(sample?.first_rows ?? 0)) / seconds) * indexBytesPerKey;
    if (bytesPerSecond > 0) outgrowsMemoryAt = new Date(Date.now() + ((memory.memoryBytes - memory.uniqueIndexBytes) / bytesPerSecond) * 1000).toISOString();
  }
  return {
    layout: expiry.layout,
    keptPastExpirySeconds: expiry.keptPastExpirySeconds,
    heapBytes: memory.heapBytes,
    indexBytes: memory.uniqueIndexBytes,
    memoryBytes: memory.memoryBytes,
    memorySource: memory.memorySource,
    sharedBuffersBytes: memory.sharedBuffersBytes,
    rows,
    bytesPerKey,
    indexBytesPerKey,
    newKeysPerSecond,
    steadyStateRows,
    steadyStateIndexBytes,
    steadyStateBytes,
    indexShareOfMemory: memory.memoryBytes > 0 ? memory.uniqueIndexBytes / memory.memoryBytes : null,
    outgrowsMemoryAt,
  };
}
