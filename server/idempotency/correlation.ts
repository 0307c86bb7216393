// The lookup of a request by the X-Correlation-Id a customer quotes: which principal, service,
// scope and key it was, and that key's metadata (never a response body), across the whole
// store. A replay carries its original's correlation id, so one id names one claim; a takeover
// keeps it too. Audited with its reason in the same transaction, like a key lookup.
import { z } from 'zod';
import { storableText } from '../storable';
import { inTransaction, type Connectable } from '../../db/transaction';
import { writeAudit } from '../audit/log';
import type { Queryable } from '@retrysafe/store/postgres';
import { CORRELATION_INDEX_PREDICATE } from '../../db/schema/idempotency-keys';
import { KEY_RECORD_COLUMNS, toKeyRecord, type KeyRecord, type KeyRecordRow } from './key-metadata';

export const correlationLookupSchema = z.strictObject({
  correlationId: z.uuid('must be a correlation id (the X-Correlation-Id header, a UUID)'),
  reason: storableText().trim().min(3, 'say why you look this request up').max(500),
});
export type CorrelationLookup = z.infer<typeof correlationLookupSchema>;

export interface CorrelationRecord extends KeyRecord {
  principalId: string;
  /** The principal's display name, null when it has none. */
  principalName: string | null;
  key: string;
}

/** Rows with that correlation id are at most a handful; this caps a pathological store. */
const MAX_RECORDS = 20;

/**
 * The keys whose claim had this correlation id: a range of idempotency_keys_correlation_idx
 * (its predicate stated so the planner may use it), then each row's principal name by the
 * principal_names primary key.
 */
export async function readCorrelationRecords(db: Queryable, correlationId: string): Promise<CorrelationRecord[]> {
  const { rows } = await db.query<KeyRecordRow & { principal_id: string; principal_name: string | null; key: string }>({
    name: 'dashboard_correlation_records',
    text: `SELECT k.principal_id, n.name AS principal_name, k.key, ${KEY_RECORD_COLUMNS}
           FROM idempotency_keys k
           LEFT JOIN principal_names n ON n.principal_id = k.principal_id
           WHERE k.correlation_id = $1::uuid AND k.${CORRELATION_INDEX_PREDICATE}
           ORDER BY k.created_at DESC LIMIT ${MAX_RECORDS}`,
    values: [correlationId],
  });
  return rows.map((row) => ({ principalId: row.principal_id, principalName: row.principal_name, key: row.key, ...toKeyRecord(row) }));
}

/** An operator's lookup by correlation id, audited (who, why, which id, how many found) in the same transaction. */
export async function lookUpCorrelation(pool: Connectable, lookup: CorrelationLookup, actor: string): Promise<CorrelationRecord[]> {
  return inTransaction(pool, async (db) => {
    const records = await readCorrelationRecords(db, lookup.correlationId);
    await writeAudit(db, {
      actor,
      action: 'key.correlation_lookup',
      target: { correlationId: lookup.correlationId },
      reason: lookup.reason,
      details: { records: records.length, ...(records[0] ? { principalId: records[0].principalId, service: records[0].service, scope: records[0].scope } : {}) },
    });
    return records;
  });
}
