// Each start of a service instance on @retrysafe/store, with the package version it runs, as the
// overview marks them: recorded by createRetrysafe in the store's retrysafe.service_starts (store
// migration 0029), an adopting service's and this server's alike (the server builds its demo
// service with createRetrysafe), and pruned by the alert-history duty (SERVER_EVENTS_RETENTION_DAYS).
import type { Queryable } from '@retrysafe/store/postgres';

export interface InstanceStart {
  at: Date;
  service: string;
  /** host:pid. */
  instance: string;
  packageVersion: string;
}

/**
 * The starts in [from, to), of `service` or every service, at most `limit`, newest first: a
 * backward range of service_starts_started_idx, stopping at `limit` (starts are a few a day an
 * instance, so the rows of other services it passes over are few too).
 */
export async function readInstanceStarts(db: Queryable, window: { from: Date; to: Date; service?: string | null }, limit: number): Promise<InstanceStart[]> {
  const { rows } = await db.query<{ started_at: Date; service: string; instance: string; package_version: string }>({
    name: 'dashboard_overview_service_starts',
    text: `SELECT started_at, service, instance, package_version FROM retrysafe.service_starts
           WHERE started_at >= $1 AND started_at < $2 AND ($3::text IS NULL OR service = $3)
           ORDER BY started_at DESC LIMIT ${Math.max(1, Math.floor(limit))}`,
    values: [window.from, window.to, window.service ?? null],
  });
  return rows.map((row) => ({ at: row.started_at, service: row.service, instance: row.instance, packageVersion: row.package_version }));
}
