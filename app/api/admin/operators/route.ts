// GET /api/admin/operators: every operator (admin). POST: create one, audited.
import { adminJson, problemFor, parseBody } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardPool } from '@/app/_lib/dashboard';
import { createOperator, listOperators, newOperatorSchema } from '@/server/auth/operators';

export const dynamic = 'force-dynamic';

export async function GET(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/operators');
  if (operator instanceof Response) return operator;
  return adminJson({ operators: await listOperators(dashboardPool()) });
}

export async function POST(request: Request): Promise<Response> {
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
