// The access review (compliance, admin): every operator with their role, whether they may sign
// in, when they were created and last signed in, and their last role change with who made it and
// why, read from the operators table and the audit log. Never a password hash, session or token.
import type { Queryable } from '@retrysafe/store/postgres';
import { toCsv } from '../audit/csv';
import { auditedExport, type ExportPools } from '../audit/export';
import { writeAudit } from '../audit/log';
import type { OperatorRole } from './roles';

export interface AccessReviewEntry {
  email: string;
  name: string;
  role: OperatorRole;
  enabled: boolean;
  createdAt: Date;
  /** The last successful sign-in (the audit log's auth.sign_in), or null: never since the log began. */
  lastSignInAt: Date | null;
  /** The last change of role (or the creation, which set the first one), or null when the log has none. */
  lastRoleChange: { at: Date; by: string; from: OperatorRole | null; to: OperatorRole; reason: string | null } | null;
}

/** The audit actions that can set a role: creation, and the change function's three (a disable or enable may carry a role change too). Constants, inlined in the SQL. */
const ROLE_ACTIONS = ['operator.create', 'operator.role', 'operator.disable', 'operator.enable'];

/**
 * Per operator: the last sign-in through audit_log_actor_at_idx (the operator's own rows, newest
 * first, to the first sign-in), the last role change from the few operator.* rows (through
 * audit_log_action_at_idx). Operators are tens, not millions.
 */
export async function readAccessReview(db: Queryable): Promise<AccessReviewEntry[]> {
  const { rows } = await db.query<{
    email: string;
    name: string;
    role: OperatorRole;
    banned: boolean;
    created_at: Date;
    last_sign_in_at: Date | null;
    changed_at: Date | null;
    changed_by: string | null;
    change_reason: string | null;
    role_from: OperatorRole | null;
    role_to: OperatorRole | null;
  }>({
    name: 'dashboard_access_review',
    // The role changes of every operator at once: the few operator.* rows, through
    // audit_log_action_at_idx (the actions are constants, so the generic plan knows them too).
    text: `WITH changes AS (
             SELECT DISTINCT ON (a.target->>'operatorId') a.target->>'operatorId' AS operator_id, a.at, a.actor, a.reason, a.action, a.details
             FROM audit_log a
             WHERE a.action IN (${ROLE_ACTIONS.map((action) => `'${action}'`).join(', ')})
               AND (a.action = 'operator.create' OR a.details->'role'->>'from' IS DISTINCT FROM a.details->'role'->>'to')
             ORDER BY a.target->>'operatorId', a.at DESC
           )
           SELECT o.email, o.name, o.role, o.banned, o.created_at, s.at AS last_sign_in_at,
                  c.at AS changed_at, c.actor AS changed_by, c.reason AS change_reason,
                  CASE WHEN c.action = 'operator.create' THEN NULL ELSE c.details->'role'->>'from' END AS role_from,
                  coalesce(c.details->'role'->>'to', c.details->>'role') AS role_to
           FROM operators o
           LEFT JOIN LATERAL (
             SELECT a.at FROM audit_log a WHERE a.actor = o.email AND a.action = 'auth.sign_in' ORDER BY a.at DESC LIMIT 1
           ) s ON true
           LEFT JOIN changes c ON c.operator_id = o.id
           ORDER BY o.email`,
  });
  return rows.map((row) => ({
    email: row.email,
    name: row.name,
    role: row.role,
    enabled: !row.banned,
    createdAt: row.created_at,
    lastSignInAt: row.last_sign_in_at,
    lastRoleChange: row.changed_at === null || row.changed_by === null ? null : { at: row.changed_at, by: row.changed_by, from: row.role_from, to: row.role_to ?? row.role, reason: row.change_reason },
  }));
}

/** The access review as CSV, audited on the primary (operators.export) before it is returned. */
export async function exportAccessReview(pools: ExportPools, actor: string): Promise<string> {
  const entries = await auditedExport(pools, readAccessReview, (db, read) => writeAudit(db, { actor, action: 'operators.export', target: { what: 'access-review' }, details: { rows: read.length } }));
  return toCsv(
    ['email', 'name', 'role', 'enabled', 'created_at', 'last_sign_in_at', 'last_role_change_at', 'last_role_change_by', 'last_role_change_from', 'last_role_change_to', 'last_role_change_reason'],
    entries.map((entry) => [entry.email, entry.name, entry.role, entry.enabled, entry.createdAt, entry.lastSignInAt, entry.lastRoleChange?.at ?? null, entry.lastRoleChange?.by ?? null, entry.lastRoleChange?.from ?? null, entry.lastRoleChange?.to ?? null, entry.lastRoleChange?.reason ?? null]),
  );
}
