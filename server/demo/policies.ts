// The demo API's published idempotency promises: the defaults its endpoint policies are
// created with on first start. Afterwards the policies live in the database
// (endpoint_policies, with history) and change only through changePolicy.
import { LEGACY_SERVICE, type EndpointPolicy } from '@retrysafe/store';
import type { PolicyFields } from '../retention/policies';

const HOUR = 3_600_000;

/**
 * The service the demo API runs as. Keys, policies and metrics from before services existed
 * were given this name by migration 0016, so an upgraded install keeps replaying them.
 */
export const DEMO_SERVICE = LEGACY_SERVICE;

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

/** The same promise; the processor call must finish within the 30-second lease, or a retry may run it again. */
export const refundsPolicy: EndpointPolicy = { ...paymentsPolicy };

/** Largest request body either endpoint accepts. */
export const MAX_REQUEST_BYTES = 16 * 1024;

function asFields(policy: EndpointPolicy): PolicyFields {
  return {
    scopeMode: policy.scopeMode,
    retryWindowSeconds: policy.retryWindowMs / 1000,
    retentionSeconds: policy.retentionMs / 1000,
    leaseMs: policy.leaseMs,
    lockTimeoutMs: policy.lockTimeoutMs,
    maxResponseBytes: policy.maxResponseBytes,
    liveKeyQuota: policy.liveKeyQuota,
  };
}

/** The built-in defaults, by endpoint. */
export const defaultPolicies: Record<string, EndpointPolicy> = {
  [PAYMENTS_ENDPOINT]: paymentsPolicy,
  [REFUNDS_ENDPOINT]: refundsPolicy,
};

export const defaultPolicyFields: Record<string, PolicyFields> = Object.fromEntries(
  Object.entries(defaultPolicies).map(([endpoint, policy]) => [endpoint, asFields(policy)]),
);
