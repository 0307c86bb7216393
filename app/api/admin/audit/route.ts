// GET /api/admin/audit?actor=&action=&from=&to=&after=&limit=: the audit log, newest first
// (compliance). With format=csv, up to 10,000 rows as a CSV download; the export itself is
// audited on the primary before it is returned (read where the dashboard reads: the standby, with
// DASHBOARD_READ_URL).
import { z } from 'zod';
import { adminJson, parseQuery, csvAttachment } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardPool, dashboardReadPool } from '@/app/_lib/dashboard';
import { exportAudit } from '@/server/audit/export';
import { auditQuerySchema, listAudit } from '@/server/audit/query';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

const requestSchema = auditQuerySchema.extend({ format: z.enum(['json', 'csv']).default('json') });

async function get(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/audit');
  if (operator instanceof Response) return operator;
  const parsed = parseQuery(request, requestSchema);
  if (parsed instanceof Response) return parsed;
  const { format, ...query } = parsed;
  if (format === 'json') return adminJson(await listAudit(dashboardReadPool(), query));
  const csv = await exportAudit({ read: dashboardReadPool(), write: dashboardPool() }, operator.email, query);
  return csvAttachment(csv, `retrysafe-audit`);
}

export const GET = handled('/api/admin/audit', get);
