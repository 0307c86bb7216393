// GET /api/admin/operators: every operator (admin). POST: create one, audited.
import { adminJson, problemFor, parseBody } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardPool, dashboardReadPool } from '@/app/_lib/dashboard';
import { createOperator, listOperators, newOperatorSchema } from '@/server/auth/operators';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

async function get(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/operators');
  if (operator instanceof Response) return operator;
  return adminJson({ operators: await listOperators(dashboardReadPool()) });
}

async function post(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/operators');
  if (operator instanceof Response) return operator;
  const parsed = await parseBody(request, newOperatorSchema);
  if (parsed instanceof Response) return parsed;
  try {
    return adminJson(await createOperator(dashboardPool(), parsed, operator), 201);
  } catch (error) {
    return problemFor(error, { OPERATOR_EXISTS: 409, ACTOR_REFUSED: 403 });
  }
}

export const GET = handled('/api/admin/operators', get);
export const POST = handled('/api/admin/operators', post);
