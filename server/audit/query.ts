// The audit log as compliance reads it: newest first, filtered by actor, action and time,
// paged by keyset (at, id). Each filter has an index that leads with it (audit_log_at_idx,
// audit_log_actor_at_idx, audit_log_action_at_idx); the statement names only the filters
// given, so the planner sees the real ones rather than "$n IS NULL OR ...".
import { z } from 'zod';
import { storableInstant, storableText } from '../storable';
import type { Queryable } from '@retrysafe/store/postgres';
import { instantFromMicros, microsOf } from '../keyset';
import { auditActions } from './actions';

const cursorSchema = z
  .string()
  .regex(/^\d{1,17}\.\d{1,18}$/, 'must be a cursor from a previous page')
  .transform((value) => {
    const [micros, id] = value.split('.');
    return { atMicros: micros ?? '0', id: id ?? '0' };
  });

export const auditQuerySchema = z.strictObject({
  actor: storableText().trim().min(1).max(254).optional(),
  /** A whole action (exact), or the start of some ("policy." matches every policy action). */
  action: storableText().trim().min(1).max(100).optional(),
  /** "hide": leave out sign-ins and sign-outs (auth.*). */
  signIns: z.enum(['hide']).optional(),
  from: storableInstant().optional(),
  to: storableInstant().optional(),
  after: cursorSchema.optional(),
  limit: z.coerce.number().int().min(1).max(500).default(100),
});
export type AuditQuery = z.infer<typeof auditQuerySchema>;

export interface AuditEntry {
  id: string;
  at: string;
  actor: string;
  action: string;
  target: Record<string, unknown>;
  reason: string | null;
  details: Record<string, unknown> | null;
  /** How many events the row stands for: 1, or a failed/refused sign-in count for one account, address and window. */
  occurrences: number;
  /** The last of them, for an aggregated row; null otherwise. */
  lastAt: string | null;
}

export interface AuditPage {
  entries: AuditEntry[];
  /** Pass as `after` for the next (older) page; null at the end. */
  next: string | null;
}

export async function listAudit(db: Queryable, query: AuditQuery): Promise<AuditPage> {
  const conditions: string[] = [];
  const values: unknown[] = [];
  const add = (condition: (placeholder: string) => string, value: unknown) => {
    values.push(value);
    conditions.push(condition(`$${values.length}`));
  };
  if (query.actor !== undefined) add((p) => `actor = ${p}`, query.actor);
  // A whole known action is an equality (audit_log_action_at_idx); anything else a prefix,
  // read newest first through audit_log_at_idx until the page is full.
  if (query.action !== undefined) {
    if ((auditActions as readonly string[]).includes(query.action)) add((p) => `action = ${p}`, query.action);
    else add((p) => `starts_with(action, ${p})`, query.action);
  }
  if (query.signIns === 'hide') conditions.push(`NOT starts_with(action, 'auth.')`);
  if (query.from !== undefined) add((p) => `at >= ${p}::timestamptz`, query.from);
  if (query.to !== undefined) add((p) => `at < ${p}::timestamptz`, query.to);
  if (query.after !== undefined) {
    values.push(query.after.atMicros, query.after.id);
    conditions.push(`(at, id) < (${instantFromMicros(`$${values.length - 1}`)}, $${values.length}::bigint)`);
  }
  values.push(query.limit + 1);
  const { rows } = await db.query<{ id: string; at: Date; at_micros: string; actor: string; action: string; target: Record<string, unknown>; reason: string | null; details: Record<string, unknown> | null; occurrences: number; last_at: Date | null }>(
    `SELECT id, at, ${microsOf('at')} AS at_micros, actor, action, target, reason, details, occurrences, last_at FROM audit_log
     ${conditions.length > 0 ? `WHERE ${conditions.join(' AND ')}` : ''}
     ORDER BY at DESC, id DESC LIMIT $${values.length}`,
    values,
  );
  const page = rows.slice(0, query.limit);
  const last = page.at(-1);
  return {
    entries: page.map((row) => ({ id: row.id, at: row.at.toISOString(), actor: row.actor, action: row.action, target: row.target, reason: row.reason, details: row.details, occurrences: row.occurrences, lastAt: row.last_at ? row.last_at.toISOString() : null })),
    next: rows.length > query.limit && last ? `${last.at_micros}.${last.id}` : null,
  };
}
