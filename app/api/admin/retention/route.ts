// GET /api/admin/retention[?service=]: each policy against its promise, the change history and
// the sweeper's evidence (compliance), and capacity (the key table against memory, the steady
// state), of every service or of one (404 for one no policy names).
import { z } from 'zod';
import { adminJson, parseQuery, problemFor } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardReadPool } from '@/app/_lib/dashboard';
import { readRetentionReview } from '@/server/retention/review';
import { serviceNameSchema } from '@/server/service-name';
import { handled } from '@/app/_lib/route-errors';
import { runtime } from '@/app/_lib/runtime';

export const dynamic = 'force-dynamic';

const querySchema = z.strictObject({ service: serviceNameSchema.optional() });

async function get(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/retention');
  if (operator instanceof Response) return operator;
  const parsed = parseQuery(request, querySchema);
  if (parsed instanceof Response) return parsed;
  try {
    const { alertThresholds, databaseMemoryBytes } = await runtime();
    return adminJson(await readRetentionReview(dashboardReadPool(), parsed.service, { databaseMemoryBytes, indexOverMemoryShare: alertThresholds.indexOverMemoryShare }));
  } catch (error) {
    return problemFor(error, { UNKNOWN_SERVICE: 404 });
  }
}

export const GET = handled('/api/admin/retention', get);
