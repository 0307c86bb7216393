// The policies in force, as the request path reads them: from memory, refreshed from the
// database every few seconds (and at once after a change made through this process), so
// a claim costs no extra round trip. A change made on another instance takes effect here
// within one refresh interval; the key's expiry is fixed from the policy seen at claim time.
import { periodicTask, type EndpointPolicy, type PeriodicTask } from '@retrysafe/store';
import { listPolicies, toEndpointPolicy, type PolicyRecord } from './policies';
import type { Queryable } from '@retrysafe/store/postgres';

export class PolicyRegistry {
  private policies = new Map<string, EndpointPolicy>();
  private readonly task: PeriodicTask;

  constructor(
    private readonly db: Queryable,
    private readonly fallbacks: Record<string, EndpointPolicy>,
    refreshMs = 5_000,
    onError: (error: unknown) => void = () => undefined,
  ) {
    this.task = periodicTask({ name: 'policy refresh', intervalMs: refreshMs, run: () => this.refresh(), onError });
  }

  /** Loads the policies (a failure is thrown; the schedule starts either way). */
  async start(): Promise<void> {
    this.task.start();
    await this.refresh();
  }

  stop(): Promise<void> {
    return this.task.stop();
  }

  async refresh(): Promise<PolicyRecord[]> {
    const records = await listPolicies(this.db);
    this.policies = new Map(records.map((record) => [record.endpoint, toEndpointPolicy(record)]));
    return records;
  }

  /** The policy in force for an endpoint; before the first load, its built-in default. */
  policyFor(endpoint: string): EndpointPolicy {
    const policy = this.policies.get(endpoint) ?? this.fallbacks[endpoint];
    if (!policy) throw new Error(`No policy for ${endpoint}`);
    return policy;
  }
}
