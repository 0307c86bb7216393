// What the dashboard may know about a stored key: metadata only, read through the store's
// KeyRecordReads (@retrysafe/store: its record types cannot hold a body, and on Postgres the
// dashboard's database role could not read one anyway). Here: the input each read accepts, and
// the audit row each lookup writes with its reason. A lookup is scoped to one principal; a key
// under another principal and an absent key look exactly alike.
import { z } from 'zod';
import { storableText } from '../storable';
import { writeAudit } from '../audit/log';
import { KEY_PATTERN, type KeyPage, type KeyRecord, type KeySummary, type KeyRecordReads, type Queryable, type StaleClaim } from '@retrysafe/store';
import { MICROS_PATTERN } from '../keyset';
import { serviceNameSchema } from '../service-name';
import { pageCounts, withTraces, type TracedKeyRecord } from './attempts';
import { markUnanswered, unansweredServices } from '../unanswered-services';
import type { StoreFiguresSource } from '../metrics/store-elsewhere';
import type { StaleElsewhereReader } from '../metrics/stale-elsewhere';

export const keyLookupSchema = z.strictObject({
  principalId: z.uuid('must be a principal id (UUID)'),
  /** One service's record only; absent: every service's. */
  service: serviceNameSchema.optional(),
  key: z.string().regex(KEY_PATTERN, 'must be 1 to 255 visible ASCII characters'),
  reason: storableText().trim().min(3, 'say why you look this key up').max(500),
});
export type KeyLookup = z.infer<typeof keyLookupSchema>;

export type { CorrelationRecord, KeyPage, KeyRecord, KeySummary, StaleClaim } from '@retrysafe/store';

/**
 * The dashboard's way to key records: the store's backend behind KeyRecordReads (Postgres:
 * PostgresKeyReads on the dashboard's restricted role, built in app/_lib/dashboard.ts), and the
 * dashboard's own database, where the audit log is written.
 */
export interface KeyAccess {
  reads: KeyRecordReads;
  audit: Queryable;
  /** Where the trace of attempts is read (Postgres, whatever the key backend: migration 0025); absent, none is shown. */
  trace?: Queryable;
  /**
   * The services whose keys are kept in Redis or MySQL (DASHBOARD_KEYS_REDIS, DASHBOARD_KEYS_MYSQL):
   * the dashboard does not release their stale claims (their own sweep or the next retry does).
   */
  keptElsewhere?: ReadonlySet<string>;
  /** The same services' backend figures, for the overview's store panels (server/metrics/store-elsewhere.ts). */
  storeFigures?: ReadonlyMap<string, StoreFiguresSource>;
  /** The same services' stale claims, for the Stale claims check and its alert (server/metrics/stale-elsewhere.ts). */
  staleElsewhere?: StaleElsewhereReader;
}

/**
 * A lookup by an operator: the records, then the audit row (who, why, what was asked). A read
 * changes nothing, so no transaction spans the two; the records are returned only once their
 * audit row is written, and a lookup whose audit fails fails.
 */
export async function lookUpKey(access: KeyAccess, lookup: KeyLookup, actor: string): Promise<TracedKeyRecord[]> {
  const found: KeyRecord[] = await access.reads.keyRecords({ principalId: lookup.principalId, key: lookup.key, service: lookup.service });
  // Each record's counts, last attempts and what a retry gets now (issue 31.2), in the same audited lookup.
  const records = await withTraces(access.trace, lookup.principalId, lookup.key, found);
  await writeAudit(access.audit, {
    actor,
    action: 'key.lookup',
    target: { principalId: lookup.principalId, ...(lookup.service ? { service: lookup.service } : {}), key: lookup.key },
    reason: lookup.reason,
    details: { records: records.length, attempts: records.reduce((sum, record) => sum + record.lastAttempts.length, 0) },
  });
  // Services whose backend did not answer (unansweredServices(records)): the route says them.
  return markUnanswered(records, unansweredServices(found));
}

export const staleClaimsQuery = z.strictObject({ limit: z.coerce.number().int().min(1).max(500).default(100), service: serviceNameSchema.optional() });

export const staleReleaseSchema = z.strictObject({
  principalId: z.uuid(),
  service: serviceNameSchema,
  scope: storableText().min(1).max(200),
  key: z.string().regex(KEY_PATTERN),
  reason: storableText().trim().min(3, 'say why you release this claim').max(500),
});

/**
 * A stale claim as the dashboard lists it. `releasable`: whether the dashboard can release it (its
 * key is in Postgres); one of a service kept in MySQL or Redis is released by that service's own
 * sweep or taken over by the next retry, and a release from the dashboard would answer 501.
 */
export interface ListedStaleClaim extends StaleClaim {
  releasable: boolean;
}

/** In-progress claims past their lease, oldest lease first: of every service, or of `service`. */
export async function listStaleClaims(access: Pick<KeyAccess, 'reads' | 'keptElsewhere'>, limit: number, service?: string): Promise<ListedStaleClaim[]> {
  const claims = await access.reads.staleClaims(limit, service);
  // Services whose backend did not answer stay marked on the answer (unansweredServices).
  return markUnanswered(
    claims.map((claim) => ({ ...claim, releasable: !(access.keptElsewhere?.has(claim.service) ?? false) })),
    unansweredServices(claims),
  );
}

const keyCursorSchema = z.strictObject({
  /** created_at in whole microseconds since the epoch (exact; a Date would round to ms). */
  createdAtMicros: z.string().regex(MICROS_PATTERN, 'must be a cursor from a previous page'),
  service: serviceNameSchema,
  scope: storableText().min(1).max(200),
  key: storableText().min(1).max(255),
});
export type KeyCursor = z.infer<typeof keyCursorSchema>;

export const keyListSchema = z.strictObject({
  principalId: z.uuid('must be a principal id (UUID)'),
  reason: storableText().trim().min(3, 'say why you list these keys').max(500),
  service: serviceNameSchema.optional(),
  scope: storableText().min(1).max(200).optional(),
  state: z.enum(['in_progress', 'completed', 'failed']).optional(),
  /** Keyset cursor: where the previous page stopped (its last key, or the last key it examined). */
  after: keyCursorSchema.optional(),
  limit: z.number().int().min(1).max(200).default(50),
});
export type KeyList = z.infer<typeof keyListSchema>;

/**
 * One principal's live keys, newest first, a page at a time (KeyRecordReads.principalKeys: on
 * Postgres a bounded backward range scan of the principal's recent-keys index, so a principal
 * with millions of keys costs one page). Listing reveals key strings, so it takes a reason and
 * is audited like a lookup, before the page is returned.
 */
/** A listed key with its marks: conflicts and mismatches recorded for it (issue 31.2). */
export type MarkedKeySummary = KeySummary & { conflicts: number; mismatches: number };
export type MarkedKeyPage = Omit<KeyPage, 'keys'> & {
  keys: MarkedKeySummary[];
  /** Services named by none in the list whose key backend did not answer: their keys are not in this page. Absent when all answered. */
  unavailable?: string[];
};

export async function listPrincipalKeys(access: KeyAccess, list: KeyList, actor: string): Promise<MarkedKeyPage> {
  const listed = await access.reads.principalKeys({ principalId: list.principalId, service: list.service, scope: list.scope, state: list.state, after: list.after, limit: list.limit });
  const counts = access.trace ? await pageCounts(access.trace, list.principalId, listed.keys) : new Map<string, { conflicts: number; mismatches: number }>();
  const page: MarkedKeyPage = {
    ...listed,
    keys: listed.keys.map((key) => {
      const count = counts.get(`${key.service}\0${key.scope}\0${key.key}`);
      return { ...key, conflicts: count?.conflicts ?? 0, mismatches: count?.mismatches ?? 0 };
    }),
  };
  const unavailable = unansweredServices(listed);
  if (unavailable.length > 0) page.unavailable = unavailable;
  await writeAudit(access.audit, {
    actor,
    action: 'key.list',
    target: { principalId: list.principalId },
    reason: list.reason,
    details: { service: list.service ?? null, scope: list.scope ?? null, state: list.state ?? null, after: list.after ?? null, keys: page.keys.length },
  });
  return page;
}
