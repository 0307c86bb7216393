// The demo API's published idempotency promises. (Retention policies move into the
// database, with history, in the retention work; these are their defaults.)
import type { EndpointPolicy } from '../idempotency/policy';

const HOUR = 3_600_000;

export const PAYMENTS_ENDPOINT = 'POST /api/v1/payments';
export const REFUNDS_ENDPOINT = 'POST /api/v1/refunds';

/** Retries are safe for 24 hours; keys are kept 2 hours longer so a late retry is never a first attempt. */
export const paymentsPolicy: EndpointPolicy = {
  scopeMode: 'endpoint',
  retryWindowMs: 24 * HOUR,
  retentionMs: 26 * HOUR,
  leaseMs: 30_000,
  lockTimeoutMs: 5_000,
  maxResponseBytes: 4_096,
  liveKeyQuota: 100_000,
};

export const refundsPolicy: EndpointPolicy = {
  scopeMode: 'endpoint',
  retryWindowMs: 24 * HOUR,
  retentionMs: 26 * HOUR,
  // The processor call must finish within the lease, or a retry may run it again.
  leaseMs: 30_000,
  lockTimeoutMs: 5_000,
  maxResponseBytes: 4_096,
  liveKeyQuota: 100_000,
};

/** Largest request body either endpoint accepts. */
export const MAX_REQUEST_BYTES = 16 * 1024;
