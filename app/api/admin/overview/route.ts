// GET /api/admin/overview?range=1h|6h|24h|7d|30d&scope=...: the dashboard's overview JSON
// (viewer). Aggregates only, read through the dashboard's restricted role.
import { runtime } from '@/app/_lib/runtime';
import { adminJson, invalid } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardPool } from '@/app/_lib/dashboard';
import { overviewQuery, readOverview } from '@/server/metrics/overview';

export const dynamic = 'force-dynamic';

export async function GET(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/overview');
  if (operator instanceof Response) return operator;
  const parsed = overviewQuery.safeParse(Object.fromEntries(new URL(request.url).searchParams));
  if (!parsed.success) return invalid(parsed.error, 'Invalid query parameters');
  const { alertThresholds } = await runtime();
  return adminJson(await readOverview(dashboardPool(), parsed.data, alertThresholds));
}
