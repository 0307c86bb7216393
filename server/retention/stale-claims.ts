// Stale claims: in-progress rows whose lease has passed (the attempt crashed or hung).
// Found through the partial index idempotency_keys_stale_lease_idx, which holds
// only in-progress rows. The store already lets a retry take such a key over; releasing
// marks it failed and retryable, so it no longer shows as running.
import type { KeyIdentity, Queryable } from '@retrysafe/store/postgres';

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

const RELEASE_ONE_SQL = 'SELECT retrysafe_release_stale_claim($1, $2, $3, $4, $5, $6) AS released';

const RELEASE_STALE_SQL = `WITH stale AS (
             SELECT ctid FROM idempotency_keys
             WHERE state = 'in_progress' AND lease_expires_at < now() - $2::bigint * interval '1 millisecond'
             ORDER BY lease_expires_at
             LIMIT $1
             FOR UPDATE SKIP LOCKED
           )
           UPDATE idempotency_keys k SET state = 'failed', lease_expires_at = NULL
           FROM stale WHERE k.ctid = stale.ctid AND k.state = 'in_progress'`;

/** The statement texts, for the tests that prove their plans. */
export const staleClaimTexts = { count: COUNT_STALE_SQL, release: RELEASE_STALE_SQL, releaseOne: RELEASE_ONE_SQL };

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
 * An operator releases one stale claim by hand, audited in the same transaction: one call of
 * the SECURITY DEFINER function retrysafe_release_stale_claim (migrations 0009, 0012, 0016), which the
 * dashboard's role may execute although it cannot write the store. Primary key lookup.
 */
export async function releaseStaleClaim(db: Queryable, id: KeyIdentity, actor: string, reason: string): Promise<void> {
  const { rows } = await db.query<{ released: boolean }>({
    name: 'retention_release_one_stale',
    text: RELEASE_ONE_SQL,
    values: [id.principalId, id.service, id.scope, id.key, actor, reason],
  });
  if (rows[0]?.released !== true) throw new ClaimNotStaleError();
}
