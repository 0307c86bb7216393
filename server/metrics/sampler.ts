// The store statistics series: once a minute one instance (a transaction-scoped advisory
// lock, and the minute as primary key) samples the store's figures and its baseline, the
// rows a store that expires on time should hold: per scope, the new keys created within
// its trailing retention (claim rate over the window x the retention). A ratio well above
// 1 means expiry is not keeping up. With it, each scope's rows and stored response bytes
// (estimated from a bounded page sample, server/metrics/scope-sample.ts).
import type pg from 'pg';
import { inTransaction } from '../../db/transaction';
import type { Queryable } from '@retrysafe/store/postgres';
import { insertScopeFigures, sampleScopeFigures, type ScopeFigures } from './scope-sample';
import { readKeyTableExpiry } from './key-table-expiry';
import { readStoreFigures, type StoreFigures } from './store-figures';

/** pg_advisory_xact_lock key: the bytes of "rsstat" as an integer. */
const SAMPLER_LOCK_KEY = 0x727373746174n;

export interface ScopeBaseline {
  service: string;
  scope: string;
  retentionSeconds: number;
  /** New keys (first claims and expired keys reused) within the trailing retention. */
  newKeys: number;
}

/**
 * Per scope, new keys within its trailing retention, from the minute buckets plus the
 * older hour buckets (a roll-up moves rows, so the two never overlap). Primary-key range
 * scans on the time column; intent scope takes the longest retention of intent policies.
 * `keptFrom`: the expiry from which a store whose cleanup keeps up still holds rows (now by
 * default; the start of the current partition in the partitioned layout, server/metrics/
 * key-table-expiry.ts): keys claimed since it less the retention. `sweptBelowSeconds`: a scope
 * whose retention is shorter is kept from now whatever `keptFrom` says (the partitioned layout's
 * sweeper deletes its keys within a sweep of their expiry).
 */
export async function readBaseline(db: Queryable, keptFrom?: Date, sweptBelowSeconds?: number | null): Promise<ScopeBaseline[]> {
  const { rows } = await db.query<{ service: string; scope: string; retention_seconds: number; new_keys: string }>({
    name: 'metrics_baseline',
    text: `
WITH scopes AS (
  SELECT service, endpoint AS scope, retention_seconds FROM endpoint_policies WHERE scope_mode = 'endpoint'
  UNION ALL
  SELECT service, 'intent', max(retention_seconds) FROM endpoint_policies WHERE scope_mode = 'intent' GROUP BY service
), kept AS (
  SELECT service, scope, retention_seconds,
         CASE WHEN retention_seconds < $2::int THEN now() ELSE coalesce($1::timestamptz, now()) END - retention_seconds * interval '1 second' AS since
  FROM scopes
)
SELECT s.service, s.scope, s.retention_seconds,
  coalesce((SELECT sum(m.count) FROM flow_counts_minute m
            WHERE m.minute >= s.since AND m.service = s.service AND m.scope = s.scope AND m.outcome = 'new'), 0)
  + coalesce((SELECT sum(h.count) FROM flow_counts_hour h
            WHERE h.hour >= s.since AND h.service = s.service AND h.scope = s.scope AND h.outcome = 'new'), 0) AS new_keys
FROM kept s ORDER BY s.service, s.scope`,
    values: [keptFrom ?? null, sweptBelowSeconds ?? null],
  });
  return rows.map((row) => ({ service: row.service, scope: row.scope, retentionSeconds: row.retention_seconds, newKeys: Number(row.new_keys) }));
}

export interface StoreSample extends StoreFigures {
  sampledAt: Date;
  baselineRows: number;
  lastSweepRunId: number | null;
  scopes: ScopeFigures[];
}

/** Takes this minute's sample unless another instance is taking or has taken it. */
export async function sampleStoreStats(pool: pg.Pool): Promise<StoreSample | null> {
  return inTransaction(pool, async (client) => {
    const { rows: lock } = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_xact_lock($1) AS locked', [SAMPLER_LOCK_KEY.toString()]);
    if (!lock[0]?.locked) return null;
    // Read once: the cleanup lag and the baseline both allow for what the layout keeps past expiry.
    const expiry = await readKeyTableExpiry(client);
    const figures = await readStoreFigures(client, expiry);
    const baseline = (await readBaseline(client, expiry.keptFrom, expiry.sweptBelowSeconds)).reduce((sum, scope) => sum + scope.newKeys, 0);
    const { rows } = await client.query<{ sampled_at: Date; last_sweep_run_id: string | null }>(
      `INSERT INTO store_stats (sampled_at, estimated_rows, baseline_rows, table_bytes, index_bytes, toast_bytes,
         oldest_row_age_seconds, cleanup_lag_seconds, stale_claims, last_sweep_run_id)
       VALUES (date_trunc('minute', now()), $1, $2, $3, $4, $5, $6, $7, $8, (SELECT max(id) FROM sweep_runs WHERE finished_at IS NOT NULL))
       ON CONFLICT (sampled_at) DO NOTHING
       RETURNING sampled_at, last_sweep_run_id`,
      [figures.estimatedRows, baseline, figures.tableBytes, figures.indexBytes, figures.toastBytes, figures.oldestRowAgeSeconds, figures.cleanupLagSeconds, figures.staleClaims],
    );
    const row = rows[0];
    if (!row) return null;
    const scopes = await sampleScopeFigures(client, figures.tableBytes);
    await insertScopeFigures(client, row.sampled_at, scopes);
    return { ...figures, sampledAt: row.sampled_at, baselineRows: baseline, lastSweepRunId: row.last_sweep_run_id === null ? null : Number(row.last_sweep_run_id), scopes };
  });
}
