// GET /api/admin/principals?name=<prefix>: principals whose display name starts with the
// prefix, case-insensitively, or the one whose id it is (operator; for /keys).
import { adminJson, parseQuery } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardReadPool } from '@/app/_lib/dashboard';
import { principalSearchQuery, searchPrincipals } from '@/server/metrics/principals';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

async function get(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/principals');
  if (operator instanceof Response) return operator;
  const parsed = parseQuery(request, principalSearchQuery);
  if (parsed instanceof Response) return parsed;
  return adminJson({ principals: await searchPrincipals(dashboardReadPool(), parsed) });
}

export const GET = handled('/api/admin/principals', get);
