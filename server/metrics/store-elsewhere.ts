// The overview's store panels for a service whose key records live in Redis or MySQL/MariaDB
// (DASHBOARD_KEYS_REDIS, DASHBOARD_KEYS_MYSQL): what its backend holds now against its baseline,
// the records a store that expires on time holds (each scope's new keys over its trailing
// retention, from the flow series in Postgres, as the store-stats sampler computes it for
// Postgres). Read live when the overview names the service, bounded whatever the number of keys:
// Redis one INFO, MySQL catalog estimates and an index range; the service's stale claims through
// its KeyRecordReads (at most STALE_COUNTED), which the overview shows in place of Postgres's. The
// series over time is the sampler's (kept-elsewhere-samples.ts): store_stats has no service column.
import { isDatabaseUnavailable } from '@retrysafe/store';
import type { Queryable } from '@retrysafe/store/postgres';
import type { MysqlStoreFigures } from '@retrysafe/store/mysql';
import type { RedisStoreFigures } from '@retrysafe/store/redis';
import type { KeyRecordReads } from '@retrysafe/store';
import { readBaseline } from './sampler';

/** Stale claims counted at most (the overview says "at least" beyond): each is a record read. */
export const STALE_COUNTED = 1_000;

/**
 * A backend's stale claims as the checks and panels show them: how many (at least, when the read
 * reached STALE_COUNTED, `read` being how many it returned before any filter) and the oldest's
 * time past its lease (a backend lists them oldest lease first).
 */
export function summariseStale(claims: readonly { pastLeaseSeconds: number }[], read: number): { count: number; atLeast: boolean; oldestPastLeaseSeconds: number | null } {
  return { count: claims.length, atLeast: read >= STALE_COUNTED, oldestPastLeaseSeconds: claims[0]?.pastLeaseSeconds ?? null };
}

export type BackendStoreFigures = ({ backend: 'redis' } & RedisStoreFigures) | ({ backend: 'mysql' } & MysqlStoreFigures);

/** A key backend's figures, and every service whose keys it holds (its figures are theirs together). */
export interface StoreFiguresSource {
  backend: BackendStoreFigures['backend'];
  services: readonly string[];
  read(): Promise<BackendStoreFigures>;
  /** The backend's key reads (its stale claims). */
  reads: Pick<KeyRecordReads, 'staleClaims'>;
}

export interface StoreElsewhere {
  service: string;
  backend: BackendStoreFigures['backend'];
  /** The services whose keys the same backend holds (its figures count them all), this one included. */
  services: string[];
  /** Those services' new keys within each scope's trailing retention: the records a store that expires on time holds. */
  baselineRecords: number;
  /** Null when the backend did not answer (down, cut, timed out). */
  figures: BackendStoreFigures | null;
  /**
   * Redis: its keys per baseline record (each record has its correlation id's entry, so about 2,
   * plus one index per principal and service; well under 2: records gone before their retention,
   * evicted; well over: other data in that Redis, or records claimed without the baseline's flow).
   * MySQL: estimated rows per baseline record (about 1; well over: expiry is not keeping up).
   */
  ratio: number | null;
  /** Redis: its used memory per baseline record, the cost of a key at this baseline. */
  bytesPerRecord: number | null;
  /** The service's claims past their lease (of the scope, when one is chosen), at most STALE_COUNTED; null when the backend did not answer. */
  staleClaims: { count: number; oldestPastLeaseSeconds: number | null; atLeast: boolean } | null;
}

const unlessUnavailable = (error: unknown) => {
  if (isDatabaseUnavailable(error)) return null;
  throw error;
};

/** The store panels of `service`, kept where `source` says; the baseline read on `db` (the dashboard's). */
export async function readStoreElsewhere(db: Queryable, choice: { service: string; scope?: string | undefined }, source: StoreFiguresSource): Promise<StoreElsewhere> {
  const { service } = choice;
  const [baseline, figures, claims] = await Promise.all([readBaseline(db), source.read().catch(unlessUnavailable), source.reads.staleClaims(STALE_COUNTED, service).catch(unlessUnavailable)]);
  const stale = claims?.filter((claim) => choice.scope === undefined || claim.scope === choice.scope) ?? null;
  const services = [...source.services].sort();
  const baselineRecords = baseline.filter((scope) => services.includes(scope.service)).reduce((sum, scope) => sum + scope.newKeys, 0);
  const held = figures === null ? null : figures.backend === 'redis' ? figures.keys : figures.estimatedRows;
  return {
    service,
    backend: source.backend,
    services,
    baselineRecords,
    figures,
    ratio: held !== null && baselineRecords > 0 ? held / baselineRecords : null,
    bytesPerRecord: figures?.backend === 'redis' && baselineRecords > 0 ? figures.usedMemoryBytes / baselineRecords : null,
    staleClaims: stale === null || claims === null ? null : summariseStale(stale, claims.length),
  };
}
