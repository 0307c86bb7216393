// The predicates of the key table's partial indexes (migration 0028, as 0011, 0012 and 0018
// made them): a statement is planned on such an index only when it states the predicate, so the
// statements that want one state it, in these words, and no request-path statement does. Stated
// once here: the store's reads use them, and the Retrysafe server's Drizzle tables
// (db/schema/idempotency-keys.ts) build the indexes from them.

/** idempotency_keys_expiry_idx: stated by the expiry scans (true of every row: no key expires at -infinity). */
export const EXPIRY_INDEX_PREDICATE = "expires_at > '-infinity'::timestamptz";
/** idempotency_keys_stale_lease_idx: implied by every stale-lease condition (lease_expires_at < x), never by the completion's state check. */
export const STALE_LEASE_INDEX_PREDICATE = "state = 'in_progress' AND lease_expires_at IS NOT NULL";
/** idempotency_keys_principal_created_idx: stated by a principal's key list (true of every row: created_at is now() at the claim). */
export const PRINCIPAL_CREATED_INDEX_PREDICATE = "created_at > '-infinity'::timestamptz";
/** idempotency_keys_correlation_idx: true of every correlation id (the nil UUID is the least); stated only by the correlation lookup. */
export const CORRELATION_INDEX_PREDICATE = "correlation_id >= '00000000-0000-0000-0000-000000000000'::uuid";
