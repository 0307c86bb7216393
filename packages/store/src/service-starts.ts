// Each start of a service's instance on this package, for the dashboard's overview (its
// `instance_start` events): the service, the instance (host:pid) and the package version, one
// row in retrysafe.service_starts (migration 0029), written by createRetrysafe at start, off the
// request path. A start that cannot be recorded is told to onError and never refused. The
// Retrysafe server prunes the table (its alert-history duty); a service alone prunes nothing (a row
// a start).
import { hostname } from 'node:os';
import type { Queryable } from './statements.js';
import { PACKAGE_VERSION } from './version.js';

/** What createRetrysafe records of this instance's start. */
export interface ServiceStart {
  service: string;
  /** host:pid, so two instances starting at once are told apart. */
  instance: string;
  packageVersion: string;
}

/** One INSERT a start (unnamed: run once per process, through any pooler). */
const RECORD_START_SQL = 'INSERT INTO retrysafe.service_starts (service, instance, package_version) VALUES ($1, $2, $3)';

/** This process's start as createRetrysafe records it for `service`. */
export function thisStart(service: string): ServiceStart {
  return { service, instance: `${hostname()}:${process.pid}`.slice(0, 300), packageVersion: PACKAGE_VERSION };
}

/** Records `start` in retrysafe.service_starts. */
export async function recordServiceStart(db: Queryable, start: ServiceStart): Promise<void> {
  await db.query(RECORD_START_SQL, [start.service, start.instance, start.packageVersion]);
}
