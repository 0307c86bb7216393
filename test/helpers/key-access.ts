// The dashboard's way to key records as app/_lib/dashboard.ts builds it: PostgresKeyReads on a
// pool (the dashboard's role in most tests), the audit log and the trace of attempts in the same database.
import type pg from 'pg';
import { PostgresKeyReads } from '@retrysafe/store/postgres';
import type { KeyAccess } from '../../server/idempotency/key-metadata';

export function postgresKeyAccess(pool: pg.Pool): KeyAccess {
  return { reads: new PostgresKeyReads(pool), audit: pool, trace: pool };
}
