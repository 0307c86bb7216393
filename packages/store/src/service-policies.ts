// A service's endpoint policies, as its request path reads them: from memory, loaded at start-up
// and refreshed from endpoint_policies every few seconds, so a claim costs no round trip and a
// change made on the dashboard's retention page reaches every instance within one refresh. The
// defaults a service passes to createRetrysafe are created when its (service, endpoint) has no
// policy yet, with their first history entry (the record of the creation): from then on the database's version is the
// published promise, and compliance reviews and edits it there. A route's own policy (given in
// code) is registered the same way when the route is created (registerRoutePolicy): its row is
// created when none exists; the route keeps running on its code's values, which are recorded so
// the retention review shows where they differ from the published row.
import type pg from 'pg';
import { PolicyNotFoundError } from './errors.js';
import { periodicTask, type PeriodicTask } from './periodic.js';
import type { EndpointPolicy } from './policy.js';
import type { Queryable } from './statements.js';

interface PolicyRow {
  endpoint: string;
  scope_mode: 'endpoint' | 'intent';
  retry_window_seconds: number;
  retention_seconds: number;
  lease_ms: number;
  lock_timeout_ms: number;
  max_response_bytes: number;
  live_key_quota: number;
}

/** What endpoint_policies and its checks accept, refused at start-up with the endpoint named. */
function checkPolicyValues(service: string, endpoint: string, policy: EndpointPolicy): void {
  const where = `policy of service "${service}" endpoint "${endpoint}"`;
  if (endpoint.length < 1 || endpoint.length > 200) throw new RangeError(`${where}: the endpoint must be 1 to 200 characters`);
  for (const [name, value] of Object.entries({ retryWindowMs: policy.retryWindowMs, retentionMs: policy.retentionMs })) {
    if (!Number.isInteger(value) || value <= 0 || value % 1000 !== 0) throw new RangeError(`${where}: ${name} must be a positive whole number of seconds, in milliseconds`);
  }
  if (policy.retentionMs < policy.retryWindowMs) throw new RangeError(`${where}: retentionMs must be at least the retry window (retryWindowMs)`);
  for (const [name, value] of Object.entries({ leaseMs: policy.leaseMs, lockTimeoutMs: policy.lockTimeoutMs, maxResponseBytes: policy.maxResponseBytes, liveKeyQuota: policy.liveKeyQuota })) {
    if (!Number.isInteger(value) || value <= 0 || value > 2_000_000_000) throw new RangeError(`${where}: ${name} must be a positive integer`);
  }
}

function toPolicy(row: PolicyRow): EndpointPolicy {
  return {
    scopeMode: row.scope_mode,
    retryWindowMs: row.retry_window_seconds * 1000,
    retentionMs: row.retention_seconds * 1000,
    leaseMs: row.lease_ms,
    lockTimeoutMs: row.lock_timeout_ms,
    maxResponseBytes: row.max_response_bytes,
    liveKeyQuota: row.live_key_quota,
  };
}

// One statement per policy created: the policy if (service, endpoint) has none and its first
// history entry (who, why, the values), only when the insert happened (two instances starting
// together create it once; the second finds the first's row and leaves it alone). The history
// entry is the record of the creation: the audit log is the Retrysafe server's, not the store's.
const CREATE_POLICY_SQL = `
WITH created AS (
  INSERT INTO retrysafe.endpoint_policies (service, endpoint, scope_mode, retry_window_seconds, retention_seconds, lease_ms,
    lock_timeout_ms, max_response_bytes, live_key_quota, updated_by)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
  ON CONFLICT (service, endpoint) DO NOTHING
  RETURNING service, endpoint
)
INSERT INTO retrysafe.endpoint_policy_history (service, endpoint, version, changed_by, reason, previous, current)
SELECT service, endpoint, 1, $10, $12, NULL, $11::jsonb FROM created
RETURNING 1`;

// A route's own policy as its code declares it (endpoint_policy_declarations' primary key): the
// latest registration's values, so the review compares them with the published row.
const DECLARE_POLICY_SQL = `
INSERT INTO retrysafe.endpoint_policy_declarations (service, endpoint, scope_mode, retry_window_seconds, retention_seconds, lease_ms,
  lock_timeout_ms, max_response_bytes, live_key_quota)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (service, endpoint) DO UPDATE SET scope_mode = EXCLUDED.scope_mode, retry_window_seconds = EXCLUDED.retry_window_seconds,
  retention_seconds = EXCLUDED.retention_seconds, lease_ms = EXCLUDED.lease_ms, lock_timeout_ms = EXCLUDED.lock_timeout_ms,
  max_response_bytes = EXCLUDED.max_response_bytes, live_key_quota = EXCLUDED.live_key_quota, declared_at = now()`;

/** Where a policy created in the database came from: its history entry's reason says so. */
export type PolicyOrigin = 'service default' | 'route';

const ORIGIN_WORDS: Record<PolicyOrigin, string> = {
  'service default': "created with the service's default policy",
  route: "created with the route's policy in code",
};

/** A policy as endpoint_policies holds it (whole seconds for the window and retention). */
function policyFields(policy: EndpointPolicy) {
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

/**
 * Creates the (service, endpoint) policy from `policy` when it has none, with its first history
 * entry (one statement; a concurrent creator's row is left alone), and the partitions a
 * partitioned layout needs beyond its retention. Returns whether it created it. Refuses (a
 * RangeError naming the endpoint) values endpoint_policies cannot hold. The one implementation:
 * createRetrysafe's defaults, routes' own policies and the Retrysafe server's demo defaults.
 */
export async function createPolicyIfAbsent(
  db: Pick<pg.Pool, 'query'>,
  service: string,
  endpoint: string,
  policy: EndpointPolicy,
  origin: PolicyOrigin,
  actor = `service:${service}`,
): Promise<boolean> {
  checkPolicyValues(service, endpoint, policy);
  const fields = policyFields(policy);
  const reason = ORIGIN_WORDS[origin];
  const { rowCount } = await db.query(CREATE_POLICY_SQL, [
    service,
    endpoint,
    fields.scopeMode,
    fields.retryWindowSeconds,
    fields.retentionSeconds,
    fields.leaseMs,
    fields.lockTimeoutMs,
    fields.maxResponseBytes,
    fields.liveKeyQuota,
    actor,
    JSON.stringify(fields),
    reason,
  ]);
  const created = (rowCount ?? 0) > 0;
  // The partitioned layout needs partitions beyond the longest retention (a no-op otherwise).
  if (created) await db.query('SELECT retrysafe.retrysafe_ensure_partitions()');
  return created;
}

/**
 * Registers a route's own policy (given in code): the endpoint's policy is created from it when
 * none exists, so the endpoint is reviewed and its keys found like any other; an existing row
 * (the published promise, an admin's to change) is never overwritten. When `declared`, the code's
 * values are recorded too, and the retention review shows where they differ from the row.
 */
export async function registerRoutePolicy(db: Pick<pg.Pool, 'query'>, service: string, endpoint: string, policy: EndpointPolicy, declared: boolean): Promise<void> {
  await createPolicyIfAbsent(db, service, endpoint, policy, 'route');
  if (declared) {
    const fields = policyFields(policy);
    await db.query(DECLARE_POLICY_SQL, [service, endpoint, fields.scopeMode, fields.retryWindowSeconds, fields.retentionSeconds, fields.leaseMs, fields.lockTimeoutMs, fields.maxResponseBytes, fields.liveKeyQuota]);
  }
}

export interface ServicePoliciesOptions {
  service: string;
  /** The service's defaults by endpoint ("POST /orders"), created where none exists yet. */
  defaults?: Record<string, EndpointPolicy>;
  refreshMs?: number;
  onError?: (error: unknown) => void;
}

export class ServicePolicies {
  private policies = new Map<string, EndpointPolicy>();
  private readonly task: PeriodicTask;
  readonly service: string;

  constructor(
    private readonly pool: Pick<pg.Pool, 'query'>,
    private readonly options: ServicePoliciesOptions,
  ) {
    this.service = options.service;
    for (const [endpoint, policy] of Object.entries(options.defaults ?? {})) checkPolicyValues(options.service, endpoint, policy);
    this.task = periodicTask({
      name: 'policy refresh',
      intervalMs: options.refreshMs ?? 5_000,
      run: () => this.refresh(),
      onError: (error) => options.onError?.(error),
    });
  }

  /** Creates the missing defaults and loads the service's policies (a failure is thrown), then refreshes them on a schedule. */
  async start(): Promise<void> {
    for (const [endpoint, policy] of Object.entries(this.options.defaults ?? {})) await createPolicyIfAbsent(this.pool, this.service, endpoint, policy, 'service default');
    await this.refresh();
    this.task.start();
  }

  stop(): Promise<void> {
    return this.task.stop();
  }

  /** Registers a route's own policy (registerRoutePolicy) on this service's pool. */
  registerRoute(endpoint: string, policy: EndpointPolicy, declared: boolean): Promise<void> {
    return registerRoutePolicy(this.pool, this.service, endpoint, policy, declared);
  }

  /** Re-reads the service's policies (primary key prefix: service). */
  async refresh(): Promise<void> {
    const { rows } = await (this.pool as Queryable).query<PolicyRow>({
      name: 'retrysafe_service_policies',
      text: `SELECT endpoint, scope_mode, retry_window_seconds, retention_seconds, lease_ms, lock_timeout_ms, max_response_bytes, live_key_quota
             FROM retrysafe.endpoint_policies WHERE service = $1`,
      values: [this.service],
    });
    this.policies = new Map(rows.map((row) => [row.endpoint, toPolicy(row)]));
  }

  /** The endpoints with a policy. */
  endpoints(): string[] {
    return [...this.policies.keys()];
  }

  /** The policy in force for one of this service's endpoints; PolicyNotFoundError naming both when there is none. */
  policyFor(endpoint: string): EndpointPolicy {
    const policy = this.policies.get(endpoint);
    if (!policy) {
      throw new PolicyNotFoundError(
        `No idempotency policy for service "${this.service}" endpoint "${endpoint}": pass one in createRetrysafe({ policies: { "${endpoint}": {...} } }), give the route its own policy, or create it on the dashboard's retention page`,
      );
    }
    return policy;
  }
}
