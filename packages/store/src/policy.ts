// What an endpoint promises about its idempotency keys. Retention policies move into
// the database with the retention work; this is the shape the store consumes.

export type ScopeMode = 'endpoint' | 'intent';
export type ExecutionMode = 'transactional' | 'claim-first';

export interface EndpointPolicy {
  /** 'endpoint': a key means one attempt at this operation. 'intent': one key covers the principal's intent across endpoints. */
  scopeMode: ScopeMode;
  /** The documented retry window: the public promise that a retry within it is safe. */
  retryWindowMs: number;
  /** How long a key is kept (window + margin); never shorter than the window. */
  retentionMs: number;
  /** claim-first: how long an attempt may run before another may take the key over. */
  leaseMs: number;
  /** transactional: how long a duplicate waits for the original's transaction before a 409. */
  lockTimeoutMs: number;
  /** Largest response body stored; above it the endpoint's reference is stored instead. */
  maxResponseBytes: number;
  /** Live keys (created within the retention) one principal may hold in this scope. */
  liveKeyQuota: number;
}

/** The marker stored as the scope of principal-only (intent-scoped) keys. */
export const INTENT_SCOPE = 'intent';

export function scopeFor(policy: EndpointPolicy, endpoint: string): string {
  return policy.scopeMode === 'intent' ? INTENT_SCOPE : endpoint;
}
