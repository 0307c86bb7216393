// Writes to the append-only audit log. Always called with the transaction of the action
// it records, so an action and its audit row commit or vanish together.
import type { Queryable } from '@retrysafe/store/postgres';
import type { AuditAction } from './actions';

export interface AuditEntry {
  actor: string;
  action: AuditAction;
  /** Identifiers of what was touched; never stored responses or request bodies. */
  target: Record<string, unknown>;
  reason?: string | null;
  details?: Record<string, unknown> | null;
}

export async function writeAudit(db: Queryable, entry: AuditEntry): Promise<void> {
  await db.query({
    name: 'audit_write',
    text: 'INSERT INTO audit_log (actor, action, target, reason, details) VALUES ($1, $2, $3, $4, $5)',
    values: [entry.actor, entry.action, JSON.stringify(entry.target), entry.reason ?? null, entry.details ? JSON.stringify(entry.details) : null],
  });
}
