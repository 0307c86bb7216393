// GET /api/admin/retention/export?what=policies|history|evidence[&service=]: the retention review
// as CSV for sign-off (compliance), of every service or of one; ?what=store[&range=24h|7d|30d]:
// the store's rows and bytes against its baseline over the range (every service). Read where the dashboard reads
// (the standby, with DASHBOARD_READ_URL) and audited on the primary before it is returned.
import { z } from 'zod';
import { parseQuery, csvAttachment, problemFor } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardPool, dashboardReadPool } from '@/app/_lib/dashboard';
import { exportRetention } from '@/server/retention/export';
import { serviceNameSchema } from '@/server/service-name';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

const querySchema = z.discriminatedUnion('what', [
  z.strictObject({ what: z.enum(['policies', 'history', 'evidence']), service: serviceNameSchema.optional() }),
  // The store is shared by every service: no service here.
  z.strictObject({ what: z.literal('store'), range: z.enum(['24h', '7d', '30d']).default('30d') }),
]);

async function get(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/retention/export');
  if (operator instanceof Response) return operator;
  const parsed = parseQuery(request, querySchema);
  if (parsed instanceof Response) return parsed;
  const pools = { read: dashboardReadPool(), write: dashboardPool() };
  if (parsed.what === 'store') return csvAttachment(await exportRetention(pools, operator.email, 'store', undefined, parsed.range), `retrysafe-retention-store-${parsed.range}`);
  const { what, service } = parsed;
  const csv = await exportRetention(pools, operator.email, what, service).catch((error: unknown) => problemFor(error, { UNKNOWN_SERVICE: 404 }));
  if (csv instanceof Response) return csv;
  return csvAttachment(csv, service === undefined ? `retrysafe-retention-${what}` : `retrysafe-retention-${what}-${service}`);
}

export const GET = handled('/api/admin/retention/export', get);
