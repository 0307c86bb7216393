// What each fault is judged by: effects in the demo tables per key (none twice, each 2xx
// backed by exactly its effect, no effect without a 2xx), answers (every 2xx of a key the same
// bytes, a last replay the same bytes again, no 500, every 503 with Retry-After, no hang),
// recovery time, and flow counts lost.
import type pg from 'pg';
import { refundReference } from '../server/demo/payments';
import { attempt, HANG_MS, idOf, type KeyRecord, type Tenant } from './load';
import type { Instance } from './instances';

export interface FaultResult {
  fault: string;
  skipped?: string;
  requests: number;
  keys: number;
  finalAnswers: number;
  duplicates: number;
  lost: number;
  replayMismatches: number;
  unanswered: number;
  statuses5xx: Record<string, number>;
  status500: number;
  without503RetryAfter: number;
  hangs: number;
  recoveryMs: number | null;
  recoveredWithoutRestart: string;
  metricsLost: number | null;
  metricsBound: number | null;
  p99Ms: number | null;
  notes: string[];
  failures: string[];
}

export function emptyResult(fault: string): FaultResult {
  return {
    fault,
    requests: 0,
    keys: 0,
    finalAnswers: 0,
    duplicates: 0,
    lost: 0,
    replayMismatches: 0,
    unanswered: 0,
    statuses5xx: {},
    status500: 0,
    without503RetryAfter: 0,
    hangs: 0,
    recoveryMs: null,
    recoveredWithoutRestart: '',
    metricsLost: null,
    metricsBound: null,
    p99Ms: null,
    notes: [],
    failures: [],
  };
}

/** Effects per key of one fault: payments by description (the key), refunds by processor reference. */
async function effectsOf(db: pg.Pool, prefix: string, records: readonly KeyRecord[]): Promise<Map<string, string[]>> {
  const effects = new Map<string, string[]>();
  const payments = await db.query<{ key: string; ids: string[] }>(
    `SELECT description AS key, array_agg(id ORDER BY created_at) AS ids FROM payments WHERE description LIKE $1 GROUP BY description`,
    [`${prefix}-%`],
  );
  for (const row of payments.rows) effects.set(row.key, row.ids);
  const refundKeys = new Map<string, string>();
  for (const record of records) if (record.kind === 'refund') refundKeys.set(refundReference(record.principalId, record.key), record.key);
  if (refundKeys.size > 0) {
    const refunds = await db.query<{ reference: string; ids: string[] }>(
      `SELECT processor_reference AS reference, array_agg(id ORDER BY created_at) AS ids FROM refunds WHERE processor_reference = ANY($1) GROUP BY processor_reference`,
      [[...refundKeys.keys()]],
    );
    for (const row of refunds.rows) {
      const key = refundKeys.get(row.reference);
      if (key) effects.set(key, row.ids);
    }
  }
  return effects;
}

export function percentile(values: number[], p: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? null;
}

/**
 * Retries every key still without a final answer (a caller that gave up retries later), then
 * replays every 2xx key once more on the other instance, and compares all with the database.
 */
export async function judge(
  result: FaultResult,
  db: pg.Pool,
  prefix: string,
  records: Map<string, KeyRecord>,
  instances: readonly Instance[],
  tenants: readonly Tenant[],
  settle: (record: KeyRecord, tenant: Tenant) => Promise<void>,
): Promise<void> {
  const all = [...records.values()];
  const tenantOf = (record: KeyRecord) => tenants.find((tenant) => tenant.principalId === record.principalId);
  const open = all.filter((record) => !record.final);
  await inBatches(open, 16, async (record) => {
    const tenant = tenantOf(record);
    if (tenant) await settle(record, tenant);
  });
  // A last replay of every completed key, on the instance its first answer did not come from.
  const completed = all.filter((record) => record.final && record.final.status >= 200 && record.final.status < 300);
  const live = instances.filter((instance) => instance.running);
  await inBatches(completed, 16, async (record) => {
    const tenant = tenantOf(record);
    const first = record.attempts.find((a) => a.status >= 200 && a.status < 300);
    const other = live.find((instance) => instance.name !== first?.instance) ?? live[0];
    if (!tenant || !other) return;
    const replay = await attempt(other, tenant, record);
    record.attempts.push(replay.attempt);
    if (replay.attempt.status >= 200 && replay.attempt.status < 300 && replay.body) {
      record.bodies.push(replay.body);
      if (!replay.attempt.replayed) result.notes.push(`${record.key}: the last retry was not marked Idempotent-Replayed`);
    } else {
      result.failures.push(`${record.key}: the last replay answered ${replay.attempt.status}`);
      result.replayMismatches++;
    }
  });

  const answered = all.flatMap((record) => record.attempts.filter((a) => a.status > 0).map((a) => a.answeredAt - a.sentAt));
  result.notes.push(`slowest answer ${Math.max(0, ...answered)} ms`);
  const effects = await effectsOf(db, prefix, all);
  for (const record of all) {
    for (const a of record.attempts) {
      result.requests++;
      if (a.status >= 500) result.statuses5xx[String(a.status)] = (result.statuses5xx[String(a.status)] ?? 0) + 1;
      if (a.status === 500) result.status500++;
      if (a.status === 503 && a.retryAfter === null) result.without503RetryAfter++;
      if (a.status === -1) result.hangs++;
      if (a.status === 0) result.statuses5xx.conn = (result.statuses5xx.conn ?? 0) + 1;
    }
    result.keys++;
    if (record.final) result.finalAnswers++;
    else result.unanswered++;
    const made = effects.get(record.key) ?? [];
    const ok = record.final !== undefined && record.final.status >= 200 && record.final.status < 300;
    if (made.length > 1) {
      result.duplicates++;
      result.failures.push(`${record.key}: its work ran ${made.length} times (${made.join(', ')})`);
    }
    if (ok && record.final) {
      const answered = idOf(record.final.body);
      if (!made.includes(answered)) {
        result.lost++;
        result.failures.push(`${record.key}: answered ${answered} but the database holds ${made.length === 0 ? 'no effect' : made.join(', ')}`);
      }
      const first = record.bodies[0];
      if (first && record.bodies.some((body) => !body.equals(first))) {
        result.replayMismatches++;
        result.failures.push(`${record.key}: its 2xx answers differ in bytes`);
      }
    } else if (made.length > 0) {
      result.lost++;
      result.failures.push(`${record.key}: its effect ${made.join(', ')} exists but it was answered ${record.final?.status ?? 'never'}`);
    }
  }
  if (result.unanswered > 0) result.failures.push(`${result.unanswered} key(s) got no final answer`);
  if (result.status500 > 0) result.failures.push(`${result.status500} answer(s) were 500`);
  if (result.without503RetryAfter > 0) result.failures.push(`${result.without503RetryAfter} 503 answer(s) without Retry-After`);
  if (result.hangs > 0) result.failures.push(`${result.hangs} attempt(s) got no answer within ${HANG_MS / 1000} s (a hang)`);
  result.failures.splice(12, Infinity, ...(result.failures.length > 12 ? [`... and ${result.failures.length - 12} more`] : []));
}

/** From the fault's end to the first new (not replayed) 2xx, per instance and overall. */
export function recovery(result: FaultResult, records: Map<string, KeyRecord>, faultEnd: number, instances: readonly Instance[], restarted: readonly string[] = []): void {
  const firsts = new Map<string, number>();
  for (const record of records.values()) {
    for (const a of record.attempts) {
      if (a.status >= 200 && a.status < 300 && !a.replayed && a.sentAt >= faultEnd) {
        firsts.set(a.instance, Math.min(firsts.get(a.instance) ?? Infinity, a.answeredAt));
      }
    }
  }
  const all = [...firsts.values()];
  result.recoveryMs = all.length > 0 ? Math.min(...all) - faultEnd : null;
  result.recoveredWithoutRestart = instances
    .map((instance) => `${instance.name}:${restarted.includes(instance.name) ? 'restarted' : firsts.has(instance.name) ? 'yes' : 'no'}`)
    .join(' ');
  if (result.recoveryMs === null) result.failures.push('no new claim succeeded after the fault ended');
  for (const instance of instances) {
    if (!restarted.includes(instance.name) && !firsts.has(instance.name)) result.failures.push(`${instance.name} served no new claim after the fault ended without a restart`);
  }
}

/** Sum of the demo service's flushed flow counts by answer class. */
export async function flowCounts(db: pg.Pool): Promise<Record<'ok' | 'conflict' | 'mismatch', number>> {
  const { rows } = await db.query<{ outcome: string; count: string }>(
    `SELECT outcome, sum(count)::bigint AS count FROM flow_counts_minute WHERE service = 'demo' GROUP BY outcome`,
  );
  const of = (names: string[]) => rows.filter((row) => names.includes(row.outcome)).reduce((sum, row) => sum + Number(row.count), 0);
  return { ok: of(['new', 'replay', 'takeover']), conflict: of(['conflict']), mismatch: of(['mismatch']) };
}

/** Answers the store decided (2xx, 409, 422) minus those the flushed counts hold. */
export function metricsLost(records: Map<string, KeyRecord>, before: Record<string, number>, after: Record<string, number>): number {
  const answered = { ok: 0, conflict: 0, mismatch: 0 };
  for (const record of records.values()) {
    for (const a of record.attempts) {
      if (a.status >= 200 && a.status < 300) answered.ok++;
      else if (a.status === 409) answered.conflict++;
      else if (a.status === 422) answered.mismatch++;
    }
  }
  let lost = 0;
  for (const name of ['ok', 'conflict', 'mismatch'] as const) lost += Math.max(0, answered[name] - ((after[name] ?? 0) - (before[name] ?? 0)));
  return lost;
}

async function inBatches<T>(items: readonly T[], size: number, each: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(size, items.length) }, async () => {
      while (next < items.length) {
        const item = items[next++];
        if (item !== undefined) await each(item);
      }
    }),
  );
}
