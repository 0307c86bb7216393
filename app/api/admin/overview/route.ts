// GET /api/admin/overview?range=1h|6h|24h|7d|30d&service=...&scope=...: the dashboard's overview JSON
// (viewer). Aggregates only, read through the dashboard's restricted role.
import { runtime } from '@/app/_lib/runtime';
import { adminJson, parseQuery } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardKeys, dashboardReadPool, dashboardReplicaLag } from '@/app/_lib/dashboard';
import { overviewQuery, readOverview } from '@/server/metrics/overview';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

async function get(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/overview');
  if (operator instanceof Response) return operator;
  const parsed = parseQuery(request, overviewQuery);
  if (parsed instanceof Response) return parsed;
  const { alertThresholds, sweepIntervalSeconds, databaseMemoryBytes } = await runtime();
  return adminJson(await readOverview(dashboardReadPool(), parsed, alertThresholds, sweepIntervalSeconds, { replicaLag: dashboardReplicaLag(), databaseMemoryBytes, storeFigures: dashboardKeys().storeFigures, staleElsewhere: dashboardKeys().staleElsewhere }));
}

export const GET = handled('/api/admin/overview', get);
