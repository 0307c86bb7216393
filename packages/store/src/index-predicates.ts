// The predicates of the key table's partial indexes (migration 0028, as 0011, 0012 and 0018
// made them): a statement is planned on such an index only when it states the predicate, so the
// statements that want one state it, in these words, and no request-path statement does. Stated
// once here: the store's reads use them, its Drizzle tables (drizzle/idempotency-keys.ts) build
// the indexes from them, and the Retrysafe server's statements import them.

/** idempotency_keys_expiry_idx: stated by the expiry scans (true of every row: no key expires at -infinity). */
export const EXPIRY_INDEX_PREDICATE = "expires_at > '-infinity'::timestamptz";
/** idempotency_keys_stale_lease_idx: implied by every stale-lease condition (lease_expires_at < x), never by the completion's state check. */
export const STALE_LEASE_INDEX_PREDICATE = "state = 'in_progress' AND lease_expires_at IS NOT NULL";
/** idempotency_keys_principal_created_idx: stated by a principal's key list (true of every row: created_at is now() at the claim). */
export const PRINCIPAL_CREATED_INDEX_PREDICATE = "created_at > '-infinity'::timestamptz";
/** idempotency_keys_correlation_idx: true of every correlation id (the nil UUID is the least); stated only by the correlation lookup. */
export const CORRELATION_INDEX_PREDICATE = "correlation_id >= '00000000-0000-0000-0000-000000000000'::uuid";

// Predicates true of every row, on a column no reader states and no upsert changes: they make
// the roll-up's time indexes its own (migration 0022, as 0021 and 0023 made them). Only the
// Retrysafe server's roll-up states them, beside a series index's step range.

/** flow_counts_series_minutes_at_idx and flow_counts_series_hours_at_idx, beside their step range. */
export const FLOW_SERIES_EVERY_ROW = "outcome > ''";
/** claim_latency_series_minutes_at_idx and claim_latency_series_hours_at_idx, beside their step range. */
export const LATENCY_SERIES_EVERY_ROW = 'bucket >= 0';
/** The principal flow tables' time indexes (principal_flow_minute_minute_idx and its kin). */
export const PRINCIPAL_TIME_INDEX_PREDICATE = "outcome > ''";
