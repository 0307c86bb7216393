// The trace of attempts as the dashboard reads it (issue 31.2): each key's counts of replays,
// conflicts, mismatches and quota refusals, its last attempts (time, outcome, status, correlation
// id), what a retry with the key gets now, and the attempts of a correlation id. Read on the
// dashboard's role (key_attempts and key_attempt_counts hold no body and no fingerprint: migration
// 0025), only rows whose key has not expired; each read is part of an audited lookup.
import type { CorrelationRecord, KeyRecord, Queryable } from '@retrysafe/store';

/** A record type's named fields, without its index signature (so it can carry objects beside them). */
type Fields<T> = { [K in keyof T as string extends K ? never : K]: T[K] };

export interface AttemptCounts {
  replays: number;
  conflicts: number;
  mismatches: number;
  quotaRefusals: number;
}

export type AttemptOutcome = 'replay' | 'conflict' | 'mismatch' | 'rejected';

export interface TracedAttempt {
  at: string;
  outcome: AttemptOutcome;
  status: number;
  correlationId: string;
}

/** What a retry with this key gets now, per the store's decision (store.ts decide()). */
export interface RetryNow {
  /** The same body: 'replay' (of `status`), 'conflict' (409, in flight), 'runs again' (a failed or crashed attempt is taken over), 'new claim' (the key expired). */
  sameBody: 'replay' | 'conflict' | 'runs again' | 'new claim';
  status: number | null;
  /** Another body: 422 while the key lives; null once it expired (a new claim). */
  otherBody: 422 | null;
  /** From then on a retry is a new claim: the key's expiry. */
  newClaimAfter: string;
  text: string;
}

export interface KeyTrace {
  counts: AttemptCounts;
  /** The last traced attempts, newest first, at most 20 (not `attempts`: a key record's `attempts` is its number of claims). */
  lastAttempts: TracedAttempt[];
}

export type TracedKeyRecord = Fields<KeyRecord> & KeyTrace & { retryNow: RetryNow };
export type TracedCorrelationRecord = Fields<CorrelationRecord> & KeyTrace & { retryNow: RetryNow };

const NO_COUNTS: AttemptCounts = { replays: 0, conflicts: 0, mismatches: 0, quotaRefusals: 0 };

export function retryNow(record: Fields<KeyRecord>): RetryNow {
  const expiry = record.expiresAt;
  if (record.secondsLeft <= 0) {
    return { sameBody: 'new claim', status: null, otherBody: null, newClaimAfter: expiry, text: `a new claim (the key expired at ${expiry})` };
  }
  const after = `; 422 for another body; a new claim after expiry at ${expiry}`;
  if (record.state === 'completed') {
    return { sameBody: 'replay', status: record.statusCode, otherBody: 422, newClaimAfter: expiry, text: `replay of ${record.statusCode ?? '?'}${after}` };
  }
  if (record.state === 'in_progress' && record.leasePassedSeconds === null) {
    return { sameBody: 'conflict', status: 409, otherBody: 422, newClaimAfter: expiry, text: `409 while in flight${after}` };
  }
  return { sameBody: 'runs again', status: null, otherBody: 422, newClaimAfter: expiry, text: `runs again (the last attempt ${record.state === 'failed' ? 'failed' : 'passed its lease'})${after}` };
}

/**
 * Each (service, scope)'s counts and last 20 attempts of one principal's key: per pair, the
 * counts by key_attempt_counts_pkey and the attempts by a backward range of key_attempts_pkey.
 */
const KEY_TRACES_SQL = `SELECT t.service, t.scope,
         coalesce(c.replays, 0) AS replays, coalesce(c.conflicts, 0) AS conflicts,
         coalesce(c.mismatches, 0) AS mismatches, coalesce(c.quota_refusals, 0) AS quota_refusals,
         coalesce((SELECT json_agg(json_build_object('at', a.at, 'outcome', a.outcome, 'status', a.status, 'correlationId', a.correlation_id) ORDER BY a.at DESC)
                   FROM (SELECT a.at, a.outcome, a.status, a.correlation_id FROM retrysafe.key_attempts a
                         WHERE a.principal_id = $1 AND a.service = t.service AND a.scope = t.scope AND a.key = $2 AND a.expires_at > now()
                         ORDER BY a.at DESC LIMIT 20) a), '[]'::json) AS attempts
  FROM unnest($3::text[], $4::text[]) AS t(service, scope)
  LEFT JOIN retrysafe.key_attempt_counts c
    ON c.principal_id = $1 AND c.service = t.service AND c.scope = t.scope AND c.key = $2 AND c.expires_at > now()`;

/** The attempts of one correlation id (a 409, 422 or 429 answer's): key_attempts_correlation_idx. */
const CORRELATION_ATTEMPTS_SQL = `SELECT a.principal_id, n.name AS principal_name, a.service, a.scope, a.key, a.at, a.outcome, a.status, a.correlation_id
  FROM retrysafe.key_attempts a LEFT JOIN retrysafe.principal_names n ON n.principal_id = a.principal_id
  WHERE a.correlation_id = $1::uuid AND a.expires_at > now()
  ORDER BY a.at DESC LIMIT 20`;

/** The key list's marks: counts of a page's keys, by key_attempt_counts_pkey. */
const PAGE_COUNTS_SQL = `SELECT c.service, c.scope, c.key, c.replays, c.conflicts, c.mismatches, c.quota_refusals
  FROM unnest($2::text[], $3::text[], $4::text[]) AS t(service, scope, key)
  JOIN retrysafe.key_attempt_counts c ON c.principal_id = $1 AND c.service = t.service AND c.scope = t.scope AND c.key = t.key AND c.expires_at > now()`;

/** The longest retention of any policy: how long any correlation id can be found. */
const LONGEST_RETENTION_SQL = `SELECT coalesce(max(retention_seconds), 0)::float8 AS seconds FROM retrysafe.endpoint_policies`;

export const attemptStatementTexts = { keyTraces: KEY_TRACES_SQL, correlationAttempts: CORRELATION_ATTEMPTS_SQL, pageCounts: PAGE_COUNTS_SQL };

interface CountsRow {
  replays: number;
  conflicts: number;
  mismatches: number;
  quota_refusals: number;
}

const countsOf = (row: CountsRow | undefined): AttemptCounts =>
  row ? { replays: row.replays, conflicts: row.conflicts, mismatches: row.mismatches, quotaRefusals: row.quota_refusals } : { ...NO_COUNTS };

/** The records with their traces and what a retry gets now (one statement for all of them). */
export async function withTraces<R extends Fields<KeyRecord>>(db: Queryable | undefined, principalId: string, key: string, records: R[]): Promise<(R & KeyTrace & { retryNow: RetryNow })[]> {
  const traces = new Map<string, KeyTrace>();
  if (db && records.length > 0) {
    const { rows } = await db.query<CountsRow & { service: string; scope: string; attempts: { at: string; outcome: AttemptOutcome; status: number; correlationId: string }[] }>({
      name: 'retrysafe_dashboard_key_traces',
      text: KEY_TRACES_SQL,
      values: [principalId, key, records.map((record) => record.service), records.map((record) => record.scope)],
    });
    for (const row of rows) {
      traces.set(`${row.service}\0${row.scope}`, {
        counts: countsOf(row),
        lastAttempts: row.attempts.map((attempt) => ({ at: new Date(attempt.at).toISOString(), outcome: attempt.outcome, status: attempt.status, correlationId: attempt.correlationId })),
      });
    }
  }
  // The trace read is of live keys (its rows carry their key's expiry), so it belongs to the live
  // record: an expired one has none left. In the partitioned layout a key used again is a new row
  // beside its expired one (kept until its partition ends), both of the same service and scope.
  const traceOf = (record: R): KeyTrace | undefined => (record.secondsLeft > 0 ? traces.get(`${record.service}\0${record.scope}`) : undefined);
  return records.map((record) => ({ ...record, ...(traceOf(record) ?? { counts: { ...NO_COUNTS }, lastAttempts: [] }), retryNow: retryNow(record) }));
}

export interface CorrelationAttempt extends TracedAttempt {
  principalId: string;
  principalName: string | null;
  service: string;
  scope: string;
  key: string;
}

export async function correlationAttempts(db: Queryable, correlationId: string): Promise<CorrelationAttempt[]> {
  const { rows } = await db.query<{ principal_id: string; principal_name: string | null; service: string; scope: string; key: string; at: Date; outcome: AttemptOutcome; status: number; correlation_id: string }>({
    name: 'retrysafe_dashboard_correlation_attempts',
    text: CORRELATION_ATTEMPTS_SQL,
    values: [correlationId],
  });
  return rows.map((row) => ({
    principalId: row.principal_id,
    principalName: row.principal_name,
    service: row.service,
    scope: row.scope,
    key: row.key,
    at: row.at.toISOString(),
    outcome: row.outcome,
    status: row.status,
    correlationId: row.correlation_id,
  }));
}

/** Counts of a page's keys (absent: none recorded), keyed `service\0scope\0key`. */
export async function pageCounts(db: Queryable, principalId: string, keys: { service: string; scope: string; key: string }[]): Promise<Map<string, AttemptCounts>> {
  const counts = new Map<string, AttemptCounts>();
  if (keys.length === 0) return counts;
  const { rows } = await db.query<CountsRow & { service: string; scope: string; key: string }>({
    name: 'retrysafe_dashboard_page_counts',
    text: PAGE_COUNTS_SQL,
    values: [principalId, keys.map((k) => k.service), keys.map((k) => k.scope), keys.map((k) => k.key)],
  });
  for (const row of rows) counts.set(`${row.service}\0${row.scope}\0${row.key}`, countsOf(row));
  return counts;
}

/** Why a correlation id found nothing, from the time a UUIDv7 carries. */
export interface NotFound {
  why: 'older-than-retention' | 'never-seen';
  /** When the id was issued (a UUIDv7's time), null when it is not one. */
  issuedAt: string | null;
  text: string;
}

/** The issue time of a UUIDv7 (its first 48 bits, milliseconds), null for any other version. */
export function issuedAtOf(id: string): Date | null {
  const hex = id.replace(/-/g, '');
  if (hex.length !== 32 || hex[12] !== '7') return null;
  return new Date(Number.parseInt(hex.slice(0, 12), 16));
}

export async function notFoundReason(db: Queryable, correlationId: string, now = Date.now()): Promise<NotFound> {
  const issued = issuedAtOf(correlationId);
  if (!issued) {
    return { why: 'never-seen', issuedAt: null, text: 'Never seen: this store issues UUIDv7 correlation ids and this is not one (mistyped, or from another system).' };
  }
  const { rows } = await db.query<{ seconds: number }>(LONGEST_RETENTION_SQL);
  const retentionSeconds = rows[0]?.seconds ?? 0;
  const ageSeconds = (now - issued.getTime()) / 1000;
  if (ageSeconds > retentionSeconds) {
    return {
      why: 'older-than-retention',
      issuedAt: issued.toISOString(),
      text: `Older than the key's retention: the id was issued at ${issued.toISOString()}, longer ago than any policy keeps a key (${Math.round(retentionSeconds / 3600)} h), so its key and attempts have been swept.`,
    };
  }
  return {
    why: 'never-seen',
    issuedAt: issued.toISOString(),
    text: `Never seen: the id was issued at ${issued.toISOString()}, within the retention, yet no key and no recorded attempt has it (mistyped, another store's, or an attempt over its principal's per-minute trace budget).`,
  };
}
