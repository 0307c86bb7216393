// What every fault shares: the harness (database, instances, tenants) and the run of a fault
// under load (start the callers, inject, let the load go on, judge the whole window).
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import type { Cluster } from './cluster';
import type { Instance } from './instances';
import { emptyResult, flowCounts, judge, metricsLost, percentile, recovery, type FaultResult } from './checks';
import { settleKey, startLoad, type KeyRecord, type LoadOptions, type Tenant } from './load';
import { startRefusedActions } from './refused-actions';

export interface Harness {
  cluster: Cluster;
  db: pg.Pool;
  instances: Instance[];
  tenants: Tenant[];
  env: Record<string, string>;
  dir: string;
  say: (line: string) => void;
}

export interface Fault {
  number: number;
  name: string;
  /** Why the machine cannot make this fault, if it cannot. */
  skip?: (harness: Harness) => string | null;
  run: (harness: Harness) => Promise<FaultResult>;
  /** Puts the database and the instances back as they were (after a failure too). */
  restore?: (harness: Harness) => Promise<void>;
}

export const CALLERS = 64;
const FLUSH_WAIT_MS = 2_000 + 1_500;

export interface Injected {
  /** When the fault was lifted (recovery is measured from here). */
  faultEnd: number;
  /** Instances restarted by the fault itself (not expected to recover on their own). */
  restarted?: string[];
  /** Most flow counts the fault may lose (one flush interval of a killed instance). */
  metricsBound?: number;
}

/** Runs the load, injects, runs on for `afterMs`, and judges. */
export async function underLoad(
  harness: Harness,
  name: string,
  prefix: string,
  inject: (records: Map<string, KeyRecord>) => Promise<Injected>,
  options: { afterMs?: number; warmupMs?: number; load?: Partial<LoadOptions> } = {},
): Promise<FaultResult> {
  const result = emptyResult(name);
  const before = await flowCounts(harness.db);
  const load = startLoad({ instances: harness.instances, tenants: harness.tenants, callers: CALLERS, prefix, raceShare: 0.1, ...options.load });
  const refused = startRefusedActions(harness.instances);
  let injected: Injected;
  let refusedStatuses: number[] = [];
  try {
    await sleep(options.warmupMs ?? 3_000);
    injected = await inject(load.records);
    await sleep(options.afterMs ?? 6_000);
  } finally {
    await load.stop();
    refusedStatuses = await refused.stop();
  }
  // Refused server actions: never a 5xx, whatever the fault (a connection error is the fault's own).
  const refusedFaults = refusedStatuses.filter((status) => status >= 500 || (status > 0 && status !== 400 && status !== 403));
  result.notes.push(`${refusedStatuses.length} refused server action request(s)`);
  if (refusedFaults.length > 0) {
    result.status500 += refusedFaults.filter((status) => status === 500).length;
    result.failures.push(`${refusedFaults.length} refused server action request(s) answered ${[...new Set(refusedFaults)].join(', ')}, not 403 or 400`);
  }
  const settle = async (record: KeyRecord, tenant: Tenant) => {
    await settleKey({ instances: harness.instances }, tenant, record, 0);
  };
  await judge(result, harness.db, prefix, load.records, harness.instances, harness.tenants, settle);
  recovery(result, load.records, injected.faultEnd, harness.instances, injected.restarted);
  await sleep(FLUSH_WAIT_MS);
  result.metricsLost = metricsLost(load.records, before, await flowCounts(harness.db));
  result.metricsBound = injected.metricsBound ?? 0;
  if (result.metricsLost > result.metricsBound) result.failures.push(`${result.metricsLost} flow count(s) lost, more than the bound of ${result.metricsBound}`);
  const served: number[] = [];
  for (const record of load.records.values()) for (const a of record.attempts) if (a.status >= 200 && a.status < 300) served.push(a.answeredAt - a.sentAt);
  result.p99Ms = percentile(served, 99);
  return result;
}

