// The completions that could not be recorded (issue 26.2, migration 0026): the keys whose work
// ran and whose response the store could not record, so that a retry after the lease runs the
// work again. An operator lists them during an incident to check each one's effect by its
// correlation id: principal, service, scope, key, correlation id, when and the error's class,
// never a response body or an error message. Every instance's, as their flushes wrote them.
// Audited with its reason, as every read of keys is.
import { z } from 'zod';
import type { Queryable } from '@retrysafe/store/postgres';
import { storableText } from '../storable';
import { serviceNameSchema } from '../service-name';
import { writeAudit } from '../audit/log';
import type { KeyAccess } from './key-metadata';

/** At most this many of the newest are listed. */
export const UNRECORDED_LIST_MAX = 500;

export const unrecordedListSchema = z.strictObject({
  reason: storableText().trim().min(3, 'say why you list these keys').max(500),
  service: serviceNameSchema.optional(),
  /** How far back, in minutes (default the hour the overview counts). */
  minutes: z.number().int().min(1).max(43_200).default(60),
  limit: z.number().int().min(1).max(UNRECORDED_LIST_MAX).default(100),
});
export type UnrecordedList = z.input<typeof unrecordedListSchema>;

export interface UnrecordedCompletion {
  principalId: string;
  service: string;
  scope: string;
  key: string;
  correlationId: string;
  at: string;
  errorClass: string;
}

export interface UnrecordedAnswer {
  /** The newest first, at most `limit`. */
  completions: UnrecordedCompletion[];
  /** Whether there were more in the window than listed. */
  more: boolean;
}

/**
 * The newest unrecorded completions since now minus $1 minutes, of one service ($2) or all: a
 * backward range of unrecorded_completions_at_idx (at, service), the service a condition inside
 * it, stopped at $3 rows. (On 'infinity', see alertLatencyText in server/metrics/alerts.ts.)
 */
export const unrecordedListText = `SELECT principal_id, service, scope, key, correlation_id, at, error_class FROM unrecorded_completions
     WHERE at >= now() - $1::int * interval '1 minute' AND at < 'infinity' AND ($2::text IS NULL OR service = $2)
     ORDER BY at DESC LIMIT $3`;

export async function readUnrecordedCompletions(db: Queryable, query: { minutes: number; service?: string | undefined; limit: number }): Promise<UnrecordedAnswer> {
  const { rows } = await db.query<{ principal_id: string; service: string; scope: string; key: string; correlation_id: string; at: Date; error_class: string }>({
    name: 'dashboard_unrecorded_completions',
    text: unrecordedListText,
    values: [query.minutes, query.service ?? null, query.limit + 1],
  });
  return {
    completions: rows.slice(0, query.limit).map((row) => ({
      principalId: row.principal_id,
      service: row.service,
      scope: row.scope,
      key: row.key,
      correlationId: row.correlation_id,
      at: row.at.toISOString(),
      errorClass: row.error_class,
    })),
    more: rows.length > query.limit,
  };
}

/**
 * An operator's list of the unrecorded completions (operator role): read from the dashboard's
 * read pool, then its audit row (who, why, which service and window, how many listed and the
 * distinct principals listed, sorted: at most UNRECORDED_LIST_MAX, so a search of the audit log
 * for a principal, `details->'principalIds' ? $1`, finds this list too), written before anything
 * is returned: no audit row, no answer.
 */
export async function listUnrecordedCompletions(access: KeyAccess, request: UnrecordedList, actor: string): Promise<UnrecordedAnswer> {
  const query = unrecordedListSchema.parse(request);
  const answer = await readUnrecordedCompletions(access.trace ?? access.audit, query);
  await writeAudit(access.audit, {
    actor,
    action: 'key.unrecorded_list',
    target: { ...(query.service ? { service: query.service } : {}), minutes: query.minutes },
    reason: query.reason,
    details: { listed: answer.completions.length, more: answer.more, principalIds: [...new Set(answer.completions.map((row) => row.principalId))].sort() },
  });
  return answer;
}
