// Stale claims: in-progress rows whose lease has passed (the attempt crashed or hung).
// Found through the partial index idempotency_keys_stale_lease_idx, which holds
// only in-progress rows. The store already lets a retry take such a key over; releasing
// marks it failed and retryable, so it no longer shows as running. The sweeper's statements
// here run on the owner's pool (Postgres maintenance); an operator's release of one claim goes
// through the store's KeyRecordReads, audited (on Postgres: withAuditedRelease).
import type { KeyIdentity, KeyRecordReads, StaleClaimRelease } from '@retrysafe/store';
import type { Queryable } from '@retrysafe/store/postgres';
import { writeAudit } from '../audit/log';
import type { KeyAccess } from '../idempotency/key-metadata';

const COUNT_STALE_SQL = `SELECT count(*)::int AS n FROM idempotency_keys
           WHERE state = 'in_progress' AND lease_expires_at < now() - $1::bigint * interval '1 millisecond'`;

/** In-progress rows whose lease ended more than `graceMs` ago (partial index range scan). */
export async function countStaleClaims(db: Queryable, graceMs = 0): Promise<number> {
  const { rows } = await db.query<{ n: number }>({
    name: 'retention_count_stale',
    text: COUNT_STALE_SQL,
    values: [graceMs],
  });
  return rows[0]?.n ?? 0;
}

const RELEASE_STALE_SQL = `WITH stale AS (
             SELECT ctid FROM idempotency_keys
             WHERE state = 'in_progress' AND lease_expires_at < now() - $2::bigint * interval '1 millisecond'
             ORDER BY lease_expires_at
             LIMIT $1
             FOR UPDATE SKIP LOCKED
           )
           UPDATE idempotency_keys k SET state = 'failed', lease_expires_at = NULL
           FROM stale WHERE k.ctid = stale.ctid AND k.state = 'in_progress'`;

/** The statement texts, for the tests that prove their plans (the release of one: keyReadStatementTexts.releaseStaleClaim). */
export const staleClaimTexts = { count: COUNT_STALE_SQL, release: RELEASE_STALE_SQL };

/**
 * Releases up to `limit` claims whose lease ended more than `graceMs` ago, oldest lease
 * first, skipping rows another transaction holds. Partial index range scan.
 */
export async function releaseStaleClaims(db: Queryable, limit: number, graceMs: number): Promise<number> {
  const result = await db.query({
    name: 'retention_release_stale',
    text: RELEASE_STALE_SQL,
    values: [limit, graceMs],
  });
  return result.rowCount ?? 0;
}

export class ClaimNotStaleError extends Error {
  readonly code = 'CLAIM_NOT_STALE';
  constructor() {
    super('No in-progress claim with an expired lease has that key');
  }
}

/**
 * The release and its audit row in one transaction: the server's SECURITY DEFINER function (its
 * migration 0002), which releases through the store's retrysafe_release_stale_claim (primary key
 * lookup; it audits nothing, the audit log being the server's) and writes the audit row. The
 * dashboard's role may execute it although it can write neither the store nor the store's function.
 */
const RELEASE_STALE_CLAIM_AUDITED_SQL = 'SELECT retrysafe_server.retrysafe_release_stale_claim_audited($1, $2, $3, $4, $5, $6) AS released';

/**
 * Postgres-kept key records as the dashboard reads them: every read `reads`' (the primary's or a
 * standby's PostgresKeyReads), the release of a stale claim on `primary` through the server's
 * audited function, so it reports `audited: true` and releaseStaleClaim writes no second row.
 */
export function withAuditedRelease(reads: KeyRecordReads, primary: Queryable): KeyRecordReads {
  return {
    keyRecords: (query) => reads.keyRecords(query),
    principalKeys: (query) => reads.principalKeys(query),
    correlationRecords: (correlationId) => reads.correlationRecords(correlationId),
    staleClaims: (limit, service) => reads.staleClaims(limit, service),
    async releaseStaleClaim(id, by): Promise<StaleClaimRelease> {
      const { rows } = await primary.query<{ released: boolean }>({
        name: 'dashboard_release_stale_claim_audited',
        text: RELEASE_STALE_CLAIM_AUDITED_SQL,
        values: [id.principalId, id.service, id.scope, id.key, by.actor, by.reason],
      });
      return rows[0]?.released === true ? { released: true, audited: true } : { released: false };
    },
  };
}

/**
 * An operator releases one stale claim by hand, audited: KeyRecordReads.releaseStaleClaim. On
 * Postgres (withAuditedRelease) one call of the server's function, which writes the audit row in
 * the release's transaction; a backend that does not audit says so (audited: false), and the
 * audit row is written here after the release.
 */
export async function releaseStaleClaim(access: KeyAccess, id: KeyIdentity, actor: string, reason: string): Promise<void> {
  const result = await access.reads.releaseStaleClaim(id, { actor, reason });
  if (!result.released) throw new ClaimNotStaleError();
  if (!result.audited) {
    await writeAudit(access.audit, {
      actor,
      action: 'stale_claim.release',
      target: { principalId: id.principalId, service: id.service, scope: id.scope, key: id.key },
      reason,
    });
  }
}
