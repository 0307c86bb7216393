// POST /api/admin/keys/correlation {correlationId, reason}: the key a request's X-Correlation-Id
// belongs to, across the store (operator): principal, service, scope, key and metadata, never
// a response body; audited as key.correlation_lookup with the reason.
import { adminJson, parseBody } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardKeys } from '@/app/_lib/dashboard';
import { correlationLookupSchema, lookUpCorrelation } from '@/server/idempotency/correlation';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

async function post(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/keys/correlation');
  if (operator instanceof Response) return operator;
  const parsed = await parseBody(request, correlationLookupSchema);
  if (parsed instanceof Response) return parsed;
  return adminJson(await lookUpCorrelation(dashboardKeys(), parsed, operator.email));
}

export const POST = handled('/api/admin/keys/correlation', post);
