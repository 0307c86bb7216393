// GET /api/admin/stale-claims?limit=&service=: in-progress claims past their lease, oldest first,
// of every service or of one (operator); 501 for a service whose key backend cannot list them.
import { adminJson, parseQuery, problemFor } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardKeys } from '@/app/_lib/dashboard';
import { listStaleClaims, staleClaimsQuery } from '@/server/idempotency/key-metadata';
import { handled } from '@/app/_lib/route-errors';
import { unansweredServices } from '@/server/unanswered-services';

export const dynamic = 'force-dynamic';

async function get(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/stale-claims');
  if (operator instanceof Response) return operator;
  const parsed = parseQuery(request, staleClaimsQuery);
  if (parsed instanceof Response) return parsed;
  try {
    const claims = await listStaleClaims(dashboardKeys(), parsed.limit, parsed.service);
    // Named when a key backend did not answer (no service named): their claims are not listed.
    const unavailable = unansweredServices(claims);
    return adminJson({ claims, ...(unavailable.length > 0 ? { unavailable } : {}) });
  } catch (error) {
    // A service whose key backend cannot list them: said, not an empty list.
    return problemFor(error, { KEY_READ_UNSUPPORTED: 501 });
  }
}

export const GET = handled('/api/admin/stale-claims', get);
