// Bulk rows for the benchmarks: completed keys with a small sealed-looking body, each created
// 26 hours before its expiry (distinct instants, as real traffic has), loaded in batches of
// 250,000 (one INSERT ... SELECT each).
import type pg from 'pg';
import type { EndpointPolicy, IdempotentCall } from '@retrysafe/store';

/**
 * The service every store benchmark's keys belong to: an adopting service's (not the demo's
 * legacy name), so the sealed responses' associated data names it as an adopter's does.
 */
export const BENCH_SERVICE = 'orders';
/** The endpoint, policy, request and response every store benchmark uses: a payment, as the demo's. */
export const BENCH_ENDPOINT = 'POST /api/v1/payments';
export const benchPolicy: EndpointPolicy = {
  scopeMode: 'endpoint',
  retryWindowMs: 86_400_000,
  retentionMs: 93_600_000,
  leaseMs: 30_000,
  lockTimeoutMs: 5_000,
  maxResponseBytes: 4_096,
  liveKeyQuota: 100_000_000,
};
export const benchBody = { amount: 1250, currency: 'EUR', description: 'Order 1234, two items' };
export const benchResponse = Buffer.from(JSON.stringify({ id: 'pay_0123456789abcdef', object: 'payment', amount: 1250, currency: 'EUR', status: 'succeeded' }));

/** The payment every store benchmark sends through execute(): claim-first, a trivial work function answering benchResponse. */
export function benchCall(principalId: string, key: string): IdempotentCall {
  return {
    principalId,
    key,
    endpoint: BENCH_ENDPOINT,
    method: 'POST',
    body: benchBody,
    policy: benchPolicy,
    mode: 'claim-first',
    work: () => Promise.resolve({ status: 201, contentType: 'application/json', body: benchResponse }),
  };
}

/**
 * Loads `rows` completed keys of 5,000 principals whose expiries spread over the day after
 * `expiresFrom`: in the past for expired keys, in the future for live ones.
 */
export async function loadCompletedKeys(pool: pg.Pool, rows: number, expiresFrom: Date): Promise<void> {
  for (let offset = 0; offset < rows; offset += 250_000) {
    await pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, response_status, response_content_type,
         response_body, response_key_id, response_size, completed_at, created_at, expires_at)
       SELECT ('00000000-0000-0000-0000-' || lpad((i % 5000)::text, 12, '0'))::uuid, $4, 'POST /api/v1/payments', 'old-' || i, 'completed',
              sha256(i::text::bytea),
              -- A UUIDv7 of its second, as the store writes them (newCorrelationId).
              (lpad(to_hex(floor(extract(epoch FROM stamp) * 1000)::bigint), 12, '0') || '7' || substr(md5(i::text), 1, 3) || '8' || substr(md5(i::text), 4, 15))::uuid,
              201, 'application/json', convert_to(repeat('x', 120), 'UTF8'), 'k1', 120,
              $3::timestamptz - interval '26 hours', stamp + (i / 86400) * interval '1 microsecond',
              $3::timestamptz + (i % 86400) * interval '1 second'
       FROM generate_series($1::int + 1, $1::int + least(250000, $2::int - $1::int)) AS i,
            LATERAL (SELECT $3::timestamptz - interval '26 hours' + (i % 86400) * interval '1 second' AS stamp) AS stamped`,
      [offset, rows, expiresFrom.toISOString(), BENCH_SERVICE],
    );
  }
}
