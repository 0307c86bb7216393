// A service's endpoint policies, as its request path reads them: from memory, loaded at start-up
// and refreshed from endpoint_policies every few seconds, so a claim costs no round trip and a
// change made on the dashboard's retention page reaches every instance within one refresh. The
// defaults a service passes to createRetrysafe are created when its (service, endpoint) has no
// policy yet, with their history entry and audit row: from then on the database's version is the
// published promise, and compliance reviews and edits it there.
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
function checkDefault(service: string, endpoint: string, policy: EndpointPolicy): void {
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

// One statement per default: the policy if (service, endpoint) has none, its first history entry
// and its audit row, only when the insert happened (two instances starting together create it once).
const CREATE_DEFAULT_SQL = `
WITH created AS (
  INSERT INTO retrysafe.endpoint_policies (service, endpoint, scope_mode, retry_window_seconds, retention_seconds, lease_ms,
    lock_timeout_ms, max_response_bytes, live_key_quota, updated_by)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
  ON CONFLICT (service, endpoint) DO NOTHING
  RETURNING service, endpoint
), history AS (
  INSERT INTO retrysafe.endpoint_policy_history (service, endpoint, version, changed_by, reason, previous, current)
  SELECT service, endpoint, 1, $10, 'created with the service''s default policy', NULL, $11::jsonb FROM created
)
INSERT INTO retrysafe.audit_log (actor, action, target, reason, details)
SELECT $10, 'policy.create', jsonb_build_object('service', service, 'endpoint', endpoint), 'default policy', jsonb_build_object('current', $11::jsonb)
FROM created
RETURNING 1`;

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
    for (const [endpoint, policy] of Object.entries(options.defaults ?? {})) checkDefault(options.service, endpoint, policy);
    this.task = periodicTask({
      name: 'policy refresh',
      intervalMs: options.refreshMs ?? 5_000,
      run: () => this.refresh(),
      onError: (error) => options.onError?.(error),
    });
  }

  /** Creates the missing defaults and loads the service's policies (a failure is thrown), then refreshes them on a schedule. */
  async start(): Promise<void> {
    let created = false;
    for (const [endpoint, policy] of Object.entries(this.options.defaults ?? {})) {
      const fields = {
        scopeMode: policy.scopeMode,
        retryWindowSeconds: policy.retryWindowMs / 1000,
        retentionSeconds: policy.retentionMs / 1000,
        leaseMs: policy.leaseMs,
        lockTimeoutMs: policy.lockTimeoutMs,
        maxResponseBytes: policy.maxResponseBytes,
        liveKeyQuota: policy.liveKeyQuota,
      };
      const { rowCount } = await this.pool.query(CREATE_DEFAULT_SQL, [
        this.service,
        endpoint,
        fields.scopeMode,
        fields.retryWindowSeconds,
        fields.retentionSeconds,
        fields.leaseMs,
        fields.lockTimeoutMs,
        fields.maxResponseBytes,
        fields.liveKeyQuota,
        `service:${this.service}`,
        JSON.stringify(fields),
      ]);
      created ||= (rowCount ?? 0) > 0;
    }
    // The partitioned layout needs partitions beyond the longest retention (a no-op otherwise).
    if (created) await this.pool.query('SELECT retrysafe.retrysafe_ensure_partitions()');
    await this.refresh();
    this.task.start();
  }

  stop(): Promise<void> {
    return this.task.stop();
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
