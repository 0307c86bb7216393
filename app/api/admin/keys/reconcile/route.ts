// POST /api/admin/keys/reconcile {reason, service?, scope?, kind?, limit?}: what the Redis-kept
// services' reconcilers found (operator): counts per service and scope of completed keys whose
// effect is missing and of claims past their lease, each service's last run, and the findings
// asked for (principal, service, scope, key, correlation id, state, times, whether the effect was
// found); never a response body. Audited as key.reconcile_list with the reason.
import { adminJson, parseBody } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardKeys } from '@/app/_lib/dashboard';
import { listReconcileFindings, reconcileListSchema } from '@/server/idempotency/reconcile';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

async function post(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/keys/reconcile');
  if (operator instanceof Response) return operator;
  const parsed = await parseBody(request, reconcileListSchema);
  if (parsed instanceof Response) return parsed;
  return adminJson(await listReconcileFindings(dashboardKeys(), parsed, operator.email));
}

export const POST = handled('/api/admin/keys/reconcile', post);
