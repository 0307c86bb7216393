// The services whose keys are kept in Redis or MySQL/MariaDB over time: once a minute the sampler
// writes what each one's backend holds (keys or estimated rows, memory or table bytes, the
// service's stale claims) to retrysafe_server.kept_elsewhere_samples (server migration 0004), and
// the overview charts a chosen service's samples. store_stats is the Postgres key table's (no
// service), so it cannot hold them. Figures a backend did not answer are null, never 0.
import type { Queryable } from '@retrysafe/store/postgres';
import { SERVER_EVENTS_RETENTION_DAYS } from './alert-history';
import type { StaleElsewhereReader } from './stale-elsewhere';
import type { StoreFiguresSource } from './store-elsewhere';

/**
 * One sample of every kept-elsewhere service, at the current minute: each backend's figures read
 * once (a backend shared by services is read once and written under each), the stale claims
 * through `stale` (the dashboard's reader: at most its budget). Written once however many
 * instances sample (the primary key, ON CONFLICT DO NOTHING); samples older than the overview's
 * longest range and some (SERVER_EVENTS_RETENTION_DAYS) are deleted (sampled_idx). Returns the
 * rows written.
 */
export async function sampleKeptElsewhere(db: Queryable, sources: ReadonlyMap<string, StoreFiguresSource>, stale: StaleElsewhereReader | undefined): Promise<number> {
  if (sources.size === 0) return 0;
  const backends = [...new Set(sources.values())];
  const [figures, claims] = await Promise.all([
    Promise.all(backends.map((source) => source.read().catch(() => null))),
    stale ? stale() : Promise.resolve([]),
  ]);
  const figuresOf = new Map(backends.map((source, i) => [source, figures[i] ?? null]));
  const claimsOf = new Map(claims.map((reading) => [reading.service, reading.claims]));
  const services = [...sources.keys()].sort();
  const columns = services.map((service) => {
    const source = sources.get(service);
    const held = source ? (figuresOf.get(source) ?? null) : null;
    const stalled = claimsOf.get(service) ?? null;
    return {
      service,
      backend: source?.backend ?? 'redis',
      keys: held === null ? null : held.backend === 'redis' ? held.keys : held.estimatedRows,
      bytes: held === null ? null : held.backend === 'redis' ? held.usedMemoryBytes : held.dataBytes + held.indexBytes,
      staleClaims: stalled === null ? null : stalled.count,
      oldestStaleSeconds: stalled === null ? null : (stalled.oldestPastLeaseSeconds ?? 0),
    };
  });
  const { rowCount } = await db.query({
    name: 'kept_elsewhere_sample',
    text: `INSERT INTO retrysafe_server.kept_elsewhere_samples (service, sampled_at, backend, keys, bytes, stale_claims, oldest_stale_seconds)
           SELECT s.service, date_trunc('minute', now()), s.backend, s.keys, s.bytes, s.stale_claims, s.oldest
           FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::int[], $6::float8[]) AS s(service, backend, keys, bytes, stale_claims, oldest)
           ON CONFLICT DO NOTHING`,
    values: [columns.map((c) => c.service), columns.map((c) => c.backend), columns.map((c) => c.keys), columns.map((c) => c.bytes), columns.map((c) => c.staleClaims), columns.map((c) => c.oldestStaleSeconds)],
  });
  await db.query({
    name: 'kept_elsewhere_retention',
    // The partial index's predicate stated, so the delete may use it.
    text: `DELETE FROM retrysafe_server.kept_elsewhere_samples WHERE sampled_at < now() - $1::int * interval '1 day' AND sampled_at > '-infinity'::timestamptz`,
    values: [SERVER_EVENTS_RETENTION_DAYS],
  });
  return rowCount ?? 0;
}

/** A step of a kept-elsewhere service's series: its last sample in the step (nulls: none, or its backend did not answer). */
export interface KeptElsewherePoint {
  t: string;
  keys: number | null;
  bytes: number | null;
  staleClaims: number | null;
  oldestStaleSeconds: number | null;
}

/** The overview's read of one service's samples: the last of each step, one backward probe of the primary key per step. */
const keptElsewhereSeriesText = `SELECT g.t, s.keys, s.bytes, s.stale_claims, s.oldest_stale_seconds
           FROM generate_series($2::timestamptz, $3::timestamptz - $4::int * interval '1 second', $4::int * interval '1 second') AS g(t)
           CROSS JOIN LATERAL (
             SELECT keys, bytes, stale_claims, oldest_stale_seconds FROM retrysafe_server.kept_elsewhere_samples
             WHERE service = $1 AND sampled_at >= g.t AND sampled_at < g.t + $4::int * interval '1 second'
             ORDER BY sampled_at DESC LIMIT 1
           ) s ORDER BY g.t`;

/** `service`'s samples over [from, to) at `stepSeconds`, a point for each step that has one. */
export async function readKeptElsewhereSeries(db: Queryable, choice: { service: string; from: Date; to: Date; stepSeconds: number }): Promise<KeptElsewherePoint[]> {
  const { rows } = await db.query<{ t: Date; keys: string | null; bytes: string | null; stale_claims: number | null; oldest_stale_seconds: number | null }>({
    name: 'dashboard_overview_kept_elsewhere',
    text: keptElsewhereSeriesText,
    values: [choice.service, choice.from, choice.to, choice.stepSeconds],
  });
  const numberOrNull = (value: string | null) => (value === null ? null : Number(value));
  return rows.map((row) => ({ t: row.t.toISOString(), keys: numberOrNull(row.keys), bytes: numberOrNull(row.bytes), staleClaims: row.stale_claims, oldestStaleSeconds: row.oldest_stale_seconds }));
}
