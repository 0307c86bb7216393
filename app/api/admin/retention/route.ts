// GET /api/admin/retention: each policy against its promise, the change history and the
// sweeper's evidence (compliance).
import { adminJson } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardPool } from '@/app/_lib/dashboard';
import { readRetentionReview } from '@/server/retention/review';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

async function get(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/retention');
  if (operator instanceof Response) return operator;
  return adminJson(await readRetentionReview(dashboardPool()));
}

export const GET = handled('/api/admin/retention', get);
