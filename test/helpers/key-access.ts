// The dashboard's way to key records as server/dashboard-pools.ts builds it: PostgresKeyReads on a
// pool (the dashboard's role in most tests) with the release of a stale claim audited by the
// server's function, the audit log and the trace of attempts in the same database.
import type pg from 'pg';
import { PostgresKeyReads } from '@retrysafe/store/postgres';
import type { KeyAccess } from '../../server/idempotency/key-metadata';
import { withAuditedRelease } from '../../server/retention/stale-claims';

export function postgresKeyAccess(pool: pg.Pool): KeyAccess {
  return { reads: withAuditedRelease(new PostgresKeyReads(pool), pool), audit: pool, trace: pool };
}
