// POST /api/admin/keys/list {principalId, reason, scope?, state?, after?, limit?}: one
// principal's live keys, a page at a time (operator); audited with the reason.
import { adminJson, parseBody } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardKeys } from '@/app/_lib/dashboard';
import { keyListSchema, listPrincipalKeys } from '@/server/idempotency/key-metadata';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

async function post(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/keys/list');
  if (operator instanceof Response) return operator;
  const parsed = await parseBody(request, keyListSchema);
  if (parsed instanceof Response) return parsed;
  return adminJson(await listPrincipalKeys(dashboardKeys(), parsed, operator.email));
}

export const POST = handled('/api/admin/keys/list', post);
