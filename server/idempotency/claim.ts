// The claim: one INSERT ... ON CONFLICT DO NOTHING RETURNING against the primary key
// (principal_id, scope, key). The unique index is the concurrency control: of any
// number of concurrent claims for one scoped key, exactly one gets a row back. There
// is never a SELECT first, so there is no window between deciding and acting.
import type pg from 'pg';

export interface ClaimRequest {
  principalId: string;
  scope: string;
  key: string;
  /** HMAC-SHA256 of the canonical request (32 bytes). */
  fingerprint: Buffer;
  correlationId: string;
  /** How long the claimant may work before another attempt may take the key over. */
  leaseMs: number;
  /** The endpoint's retention at claim time: how long the key (and its promise) lives. */
  retentionMs: number;
}

const CLAIM_SQL = `
INSERT INTO idempotency_keys
  (principal_id, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
VALUES
  ($1, $2, $3, 'in_progress', $4, $5,
   now() + $6::bigint * interval '1 millisecond',
   now() + $7::bigint * interval '1 millisecond')
ON CONFLICT (principal_id, scope, key) DO NOTHING
RETURNING created_at, expires_at`;

export interface ClaimGranted {
  createdAt: Date;
  expiresAt: Date;
}

/** Inserts the claim; returns the new row's times, or null when the scoped key already exists. */
export async function insertClaim(db: pg.ClientBase | pg.Pool, claim: ClaimRequest): Promise<ClaimGranted | null> {
  const result = await db.query<{ created_at: Date; expires_at: Date }>({
    name: 'retrysafe_claim_insert',
    text: CLAIM_SQL,
    values: [
      claim.principalId,
      claim.scope,
      claim.key,
      claim.fingerprint,
      claim.correlationId,
      Math.round(claim.leaseMs),
      Math.round(claim.retentionMs),
    ],
  });
  const row = result.rows[0];
  return row ? { createdAt: row.created_at, expiresAt: row.expires_at } : null;
}
