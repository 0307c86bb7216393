// Each start of a Retrysafe server instance, with the @retrysafe/store version it runs
// (retrysafe_server.instance_starts), so the overview marks when the server was (re)started or
// upgraded. An adopting service's own starts are not recorded: the package's schema has no place
// for them yet.
import { hostname } from 'node:os';
import type { Queryable } from '@retrysafe/store/postgres';
import storePackage from '@retrysafe/store/package.json' with { type: 'json' };

/** The @retrysafe/store version this server runs. */
export const STORE_PACKAGE_VERSION: string = storePackage.version;

export interface InstanceStart {
  at: Date;
  service: string;
  instance: string;
  packageVersion: string;
}

/** Records this instance's start (one row a start: each instance writes its own). */
export async function recordInstanceStart(db: Queryable, start: { service: string; instance?: string; packageVersion?: string }): Promise<InstanceStart> {
  const instance = start.instance ?? `${hostname()}:${process.pid}`;
  const packageVersion = start.packageVersion ?? STORE_PACKAGE_VERSION;
  const { rows } = await db.query<{ started_at: Date }>(
    'INSERT INTO retrysafe_server.instance_starts (service, instance, package_version) VALUES ($1, $2, $3) RETURNING started_at',
    [start.service, instance, packageVersion],
  );
  const row = rows[0];
  if (!row) throw new Error('no instance start row');
  return { at: row.started_at, service: start.service, instance, packageVersion };
}

/** The starts in [from, to), at most `limit`, newest first: a backward range of instance_starts_started_idx. */
export async function readInstanceStarts(db: Queryable, window: { from: Date; to: Date }, limit: number): Promise<InstanceStart[]> {
  const { rows } = await db.query<{ started_at: Date; service: string; instance: string; package_version: string }>({
    name: 'dashboard_overview_instance_starts',
    text: `SELECT started_at, service, instance, package_version FROM retrysafe_server.instance_starts
           WHERE started_at >= $1 AND started_at < $2 ORDER BY started_at DESC LIMIT ${Math.max(1, Math.floor(limit))}`,
    values: [window.from, window.to],
  });
  return rows.map((row) => ({ at: row.started_at, service: row.service, instance: row.instance, packageVersion: row.package_version }));
}
