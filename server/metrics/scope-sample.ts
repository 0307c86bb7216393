// Rows and stored response bytes per scope. No index holds response sizes, and summing them
// over an 86-million-row table is a full scan, so the figures are estimated from a bounded
// random sample of the table's pages (TABLESAMPLE SYSTEM): about SCOPE_SAMPLE_PAGES pages
// whatever the table's size, scaled up by the sampled fraction. A table that small is read
// whole, and the figures are then exact. Taken by the store-statistics leader once a minute.
import type { Queryable } from '@retrysafe/store/postgres';

/** Pages read per sample: 2,000 pages is 16 MiB at the default block size. */
export const SCOPE_SAMPLE_PAGES = 2_000;

export interface ScopeFigures {
  service: string;
  scope: string;
  estimatedRows: number;
  /** Stored (sealed) response body bytes; a response kept as a reference adds nothing. */
  responseBytes: number;
  /** Share of the table's pages read, 0..1 (1: exact). */
  sampledFraction: number;
}

/** Estimates each scope's rows and response bytes from about `pages` pages of the key table. */
export async function sampleScopeFigures(db: Queryable, tableBytes: number, pages = SCOPE_SAMPLE_PAGES): Promise<ScopeFigures[]> {
  const { rows: setting } = await db.query<{ block_size: number }>("SELECT current_setting('block_size')::int AS block_size");
  const tablePages = Math.max(1, Math.ceil(tableBytes / (setting[0]?.block_size ?? 8192)));
  const fraction = Math.min(1, pages / tablePages);
  // SYSTEM picks whole pages with the given probability (in percent); on the partitioned
  // layout it samples each partition. octet_length of a bytea reads the TOAST header only.
  const { rows } = await db.query<{ service: string; scope: string; sampled_rows: string; sampled_bytes: string }>({
    name: 'metrics_scope_sample',
    text: `SELECT service, scope, count(*) AS sampled_rows, coalesce(sum(octet_length(response_body)), 0) AS sampled_bytes
           FROM idempotency_keys TABLESAMPLE SYSTEM ($1) GROUP BY service, scope ORDER BY service, scope`,
    values: [fraction * 100],
  });
  return rows.map((row) => ({
    service: row.service,
    scope: row.scope,
    estimatedRows: Math.round(Number(row.sampled_rows) / fraction),
    responseBytes: Math.round(Number(row.sampled_bytes) / fraction),
    sampledFraction: fraction,
  }));
}

/** Writes a sample's per-scope figures beside its store_stats row. */
export async function insertScopeFigures(db: Queryable, sampledAt: Date, figures: ScopeFigures[]): Promise<void> {
  if (figures.length === 0) return;
  await db.query(
    `INSERT INTO store_stats_scopes (sampled_at, service, scope, estimated_rows, response_bytes, sampled_fraction)
     SELECT $1, * FROM unnest($6::text[], $2::text[], $3::bigint[], $4::bigint[], $5::float8[])`,
    [
      sampledAt,
      figures.map((figure) => figure.scope),
      figures.map((figure) => figure.estimatedRows),
      figures.map((figure) => figure.responseBytes),
      figures.map((figure) => figure.sampledFraction),
      figures.map((figure) => figure.service),
    ],
  );
}

export interface ScopeSample extends ScopeFigures {
  sampledAt: Date;
}

/**
 * The most recent per-scope sample taken before `before` (default: now): max(sampled_at) by
 * a backward scan of the primary key, then that minute's rows by its prefix.
 */
export async function readLatestScopeFigures(db: Queryable, before: Date | null = null): Promise<ScopeSample[]> {
  const { rows } = await db.query<{ sampled_at: Date; service: string; scope: string; estimated_rows: string; response_bytes: string; sampled_fraction: number }>({
    name: 'metrics_latest_scope_figures',
    text: `SELECT sampled_at, service, scope, estimated_rows, response_bytes, sampled_fraction FROM store_stats_scopes
           WHERE sampled_at = (SELECT max(sampled_at) FROM store_stats_scopes WHERE sampled_at < coalesce($1::timestamptz, 'infinity'))
           ORDER BY service, scope`,
    values: [before],
  });
  return rows.map((row) => ({
    sampledAt: row.sampled_at,
    service: row.service,
    scope: row.scope,
    estimatedRows: Number(row.estimated_rows),
    responseBytes: Number(row.response_bytes),
    sampledFraction: row.sampled_fraction,
  }));
}
