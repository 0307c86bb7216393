// POST /api/admin/keys/unrecorded {reason, service?, minutes?, limit?}: the keys whose work ran
// and whose completion could not be recorded (operator), newest first, across principals:
// principal, service, scope, key, correlation id, when, the error's class; never a response
// body. Audited as key.unrecorded_list with the reason.
import { adminJson, parseBody } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardKeys } from '@/app/_lib/dashboard';
import { listUnrecordedCompletions, unrecordedListSchema } from '@/server/idempotency/unrecorded';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

async function post(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/keys/unrecorded');
  if (operator instanceof Response) return operator;
  const parsed = await parseBody(request, unrecordedListSchema);
  if (parsed instanceof Response) return parsed;
  return adminJson(await listUnrecordedCompletions(dashboardKeys(), parsed, operator.email));
}

export const POST = handled('/api/admin/keys/unrecorded', post);
