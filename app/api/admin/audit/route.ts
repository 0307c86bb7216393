// GET /api/admin/audit?actor=&action=&from=&to=&after=&limit=: the audit log, newest first
// (compliance). With format=csv, up to 10,000 rows as a CSV download; the export itself is
// audited, in the same transaction as the read.
import { z } from 'zod';
import { inTransaction } from '@/db/transaction';
import { adminJson, parseQuery, csvAttachment } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardPool } from '@/app/_lib/dashboard';
import { toCsv } from '@/server/audit/csv';
import { writeAudit } from '@/server/audit/log';
import { auditQuerySchema, listAudit } from '@/server/audit/query';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

const EXPORT_LIMIT = 10_000;

const requestSchema = auditQuerySchema.extend({ format: z.enum(['json', 'csv']).default('json') });

async function get(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/audit');
  if (operator instanceof Response) return operator;
  const parsed = parseQuery(request, requestSchema);
  if (parsed instanceof Response) return parsed;
  const { format, ...query } = parsed;
  if (format === 'json') return adminJson(await listAudit(dashboardPool(), query));
  const page = await inTransaction(dashboardPool(), async (db) => {
    const read = await listAudit(db, { ...query, limit: EXPORT_LIMIT });
    const filters = { actor: query.actor, action: query.action, from: query.from, to: query.to, signIns: query.signIns };
    await writeAudit(db, { actor: operator.email, action: 'audit.export', target: { filters }, details: { rows: read.entries.length, truncated: read.next !== null } });
    return read;
  });
  const csv = toCsv(
    ['id', 'at', 'actor', 'action', 'target', 'reason', 'details', 'occurrences', 'last_at'],
    page.entries.map((entry) => [entry.id, entry.at, entry.actor, entry.action, entry.target, entry.reason, entry.details, entry.occurrences, entry.lastAt]),
  );
  return csvAttachment(csv, `retrysafe-audit`);
}

export const GET = handled('/api/admin/audit', get);
