// The lookup of a request by the X-Correlation-Id a customer quotes: which principal, service,
// scope and key it was, and that key's metadata (never a response body), across the whole
// store, through the store's KeyRecordReads. A replay carries its original's correlation id, so
// one id names one claim; a takeover keeps it too. Audited with its reason, like a key lookup.
import { z } from 'zod';
import type { CorrelationRecord } from '@retrysafe/store';
import { storableText } from '../storable';
import { writeAudit } from '../audit/log';
import type { KeyAccess } from './key-metadata';

export type { CorrelationRecord } from '@retrysafe/store';

export const correlationLookupSchema = z.strictObject({
  correlationId: z.uuid('must be a correlation id (the X-Correlation-Id header, a UUID)'),
  reason: storableText().trim().min(3, 'say why you look this request up').max(500),
});
export type CorrelationLookup = z.infer<typeof correlationLookupSchema>;

/**
 * An operator's lookup by correlation id, then its audit row (who, why, which id, how many
 * found); the records are returned only once the audit row is written.
 */
export async function lookUpCorrelation(access: KeyAccess, lookup: CorrelationLookup, actor: string): Promise<CorrelationRecord[]> {
  const records = await access.reads.correlationRecords(lookup.correlationId);
  await writeAudit(access.audit, {
    actor,
    action: 'key.correlation_lookup',
    target: { correlationId: lookup.correlationId },
    reason: lookup.reason,
    details: { records: records.length, ...(records[0] ? { principalId: records[0].principalId, service: records[0].service, scope: records[0].scope } : {}) },
  });
  return records;
}
