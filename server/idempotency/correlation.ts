// The lookup of a request by the X-Correlation-Id a customer quotes: which principal, service,
// scope and key it was, and that key's metadata (never a response body), across the whole
// store, through the store's KeyRecordReads. A replay carries its original's correlation id, so
// one id names one claim; a takeover keeps it too. Audited with its reason, like a key lookup.
import { z } from 'zod';
import type { CorrelationRecord } from '@retrysafe/store';
import { storableText } from '../storable';
import { writeAudit } from '../audit/log';
import type { KeyAccess } from './key-metadata';
import { notKeptServices, unansweredServices } from '../unanswered-services';
import { correlationAttempts, notFoundReason, withTraces, type CorrelationAttempt, type NotFound, type TracedCorrelationRecord, type TracedKeyRecord } from './attempts';

export type { CorrelationRecord } from '@retrysafe/store';

export const correlationLookupSchema = z.strictObject({
  correlationId: z.uuid('must be a correlation id (the X-Correlation-Id header, a UUID)'),
  reason: storableText().trim().min(3, 'say why you look this request up').max(500),
});
export type CorrelationLookup = z.infer<typeof correlationLookupSchema>;

/** A rejected (or replayed) attempt of the id, with its key's record when the key is live. */
export interface CorrelationAttemptFound extends CorrelationAttempt {
  record: TracedKeyRecord | null;
}

export interface CorrelationAnswer {
  /** The keys whose claim had this id (a first request; a replay answers with it too). */
  records: TracedCorrelationRecord[];
  /** The traced attempts that had this id: a 409, 422 or 429 answer's, or a replay's own. */
  attempts: CorrelationAttemptFound[];
  /** Set when both are empty: why (older than the key's retention, or never seen). */
  notFound: NotFound | null;
  /** Services whose key backend did not answer: their keys are not in `records`. Absent when all answered. */
  unavailable?: string[];
  /**
   * Services whose key backend keeps no index by correlation id (a Redis Cluster), each with why:
   * their keys are not in `records`, which is not "not found". Absent when every backend keeps one.
   */
  notKept?: { service: string; reason: string }[];
}

/**
 * An operator's lookup by correlation id: the keys claimed with it and the traced attempts that
 * had it (each with its key's record), or why nothing was found; then its audit row (who, why,
 * which id, how many found). Returned only once the audit row is written.
 */
export async function lookUpCorrelation(access: KeyAccess, lookup: CorrelationLookup, actor: string): Promise<CorrelationAnswer> {
  const found: CorrelationRecord[] = await access.reads.correlationRecords(lookup.correlationId);
  const records = await Promise.all(found.map(async (record) => (await withTraces(access.trace, record.principalId, record.key, [record]))[0] as TracedCorrelationRecord));
  const traced = access.trace ? await correlationAttempts(access.trace, lookup.correlationId) : [];
  const attempts = await Promise.all(
    traced.map(async (attempt): Promise<CorrelationAttemptFound> => {
      const keyRecords = await access.reads.keyRecords({ principalId: attempt.principalId, key: attempt.key, service: attempt.service });
      const own = keyRecords.filter((record) => record.scope === attempt.scope);
      const [record] = await withTraces(access.trace, attempt.principalId, attempt.key, own);
      return { ...attempt, record: record ?? null };
    }),
  );
  const notFound = records.length === 0 && attempts.length === 0 ? await notFoundReason(access.trace ?? access.audit, lookup.correlationId) : null;
  const first = records[0] ?? attempts[0];
  await writeAudit(access.audit, {
    actor,
    action: 'key.correlation_lookup',
    target: { correlationId: lookup.correlationId },
    reason: lookup.reason,
    details: { records: records.length, attempts: attempts.length, ...(first ? { principalId: first.principalId, service: first.service, scope: first.scope } : {}) },
  });
  const unavailable = unansweredServices(found);
  const notKept = notKeptServices(found);
  return { records, attempts, notFound, ...(unavailable.length > 0 ? { unavailable } : {}), ...(notKept.length > 0 ? { notKept } : {}) };
}
