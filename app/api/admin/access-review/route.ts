// GET /api/admin/access-review[?format=csv] (compliance): every operator with role, enabled,
// created, last sign-in and last role change (who, when, why); never a hash or token. The CSV
// export is audited on the primary before it is returned.
import { z } from 'zod';
import { adminJson, csvAttachment, parseQuery } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardPool, dashboardReadPool } from '@/app/_lib/dashboard';
import { handled } from '@/app/_lib/route-errors';
import { exportAccessReview, readAccessReview } from '@/server/auth/access-review';

export const dynamic = 'force-dynamic';

const querySchema = z.strictObject({ format: z.enum(['json', 'csv']).default('json') });

async function get(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/access-review');
  if (operator instanceof Response) return operator;
  const parsed = parseQuery(request, querySchema);
  if (parsed instanceof Response) return parsed;
  if (parsed.format === 'json') return adminJson({ operators: await readAccessReview(dashboardReadPool()) });
  return csvAttachment(await exportAccessReview({ read: dashboardReadPool(), write: dashboardPool() }, operator.email), 'retrysafe-access-review');
}

export const GET = handled('/api/admin/access-review', get);
