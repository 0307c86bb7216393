// GET /api/admin/overview?range=1h|6h|24h|7d|30d&scope=...: the dashboard's overview JSON.
// Aggregates only. Until operator sessions land it is guarded like /api/metrics (METRICS_TOKEN when set).
import { randomUUID } from 'node:crypto';
import { runtime } from '@/app/_lib/runtime';
import { problemResponse } from '@/server/idempotency/http';
import { overviewQuery, readOverview } from '@/server/metrics/overview';
import { metricsAuthorized } from '@/server/metrics/prometheus';

export const dynamic = 'force-dynamic';

export async function GET(request: Request): Promise<Response> {
  const services = await runtime();
  if (!metricsAuthorized(request.headers.get('authorization'), services.metricsToken)) {
    return problemResponse({ status: 401, slug: 'unauthenticated', title: 'Authentication required', headers: { 'WWW-Authenticate': 'Bearer' } }, randomUUID());
  }
  const parsed = overviewQuery.safeParse(Object.fromEntries(new URL(request.url).searchParams));
  if (!parsed.success) {
    return problemResponse(
      {
        status: 400,
        slug: 'invalid-query',
        title: 'Invalid query parameters',
        errors: parsed.error.issues.map((issue) => ({ path: issue.path.join('.'), message: issue.message })),
      },
      randomUUID(),
    );
  }
  const overview = await readOverview(services.ownerPool, parsed.data, services.alertThresholds);
  return Response.json(overview, { headers: { 'Cache-Control': 'no-store' } });
}
