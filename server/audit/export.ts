// Exports (CSV) read where the dashboard reads (a hot standby when DASHBOARD_READ_URL is set, in
// one read-only snapshot) and are audited on the primary before anything is returned: an export
// whose audit row cannot be written returns nothing.
import { BEGIN_READ_ONLY_SNAPSHOT, inTransaction, type Connectable } from '../../db/transaction';
import type { Queryable } from '@retrysafe/store/postgres';
import { toCsv } from './csv';
import { writeAudit } from './log';
import { listAudit, type AuditQuery } from './query';

export interface ExportPools {
  /** Where the export's rows are read: the dashboard's read pool (the standby's, or the primary's). */
  read: Connectable;
  /** Where its audit row is written: the dashboard's pool on the primary. */
  write: Connectable;
}

/** Reads `read` in one snapshot on `pools.read`, then writes its audit row with `audit` on the primary; only then returns it. */
export async function auditedExport<T>(pools: ExportPools, read: (db: Queryable) => Promise<T>, audit: (db: Queryable, exported: T) => Promise<void>): Promise<T> {
  const exported = await inTransaction(pools.read, read, BEGIN_READ_ONLY_SNAPSHOT);
  await inTransaction(pools.write, (db) => audit(db, exported));
  return exported;
}

/** Rows in an audit log export (the page shows 50 at a time). */
export const AUDIT_EXPORT_LIMIT = 10_000;

/** The audit log as CSV (newest first, at most AUDIT_EXPORT_LIMIT rows of `query`); the export is audited with its filters and row count. */
export async function exportAudit(pools: ExportPools, actor: string, query: AuditQuery): Promise<string> {
  const page = await auditedExport(
    pools,
    (db) => listAudit(db, { ...query, limit: AUDIT_EXPORT_LIMIT }),
    (db, read) => {
      const filters = { actor: query.actor, action: query.action, from: query.from, to: query.to, signIns: query.signIns };
      return writeAudit(db, { actor, action: 'audit.export', target: { filters }, details: { rows: read.entries.length, truncated: read.next !== null } });
    },
  );
  return toCsv(
    ['id', 'at', 'actor', 'action', 'target', 'reason', 'details', 'occurrences', 'last_at'],
    page.entries.map((entry) => [entry.id, entry.at, entry.actor, entry.action, entry.target, entry.reason, entry.details, entry.occurrences, entry.lastAt]),
  );
}
