// PATCH /api/admin/operators/:id {role?, disabled?, reason}: change a role, disable (ending
// every live session at once) or enable an operator (admin); audited with the reason.
import { storableText } from '@/server/storable';
import { adminJson, invalid, problemFor, parseBody } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardPool } from '@/app/_lib/dashboard';
import { changeOperator, operatorChangeSchema } from '@/server/auth/operators';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

const idSchema = storableText().min(1).max(64);

async function patch(request: Request, context: { params: Promise<{ id: string }> }): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/operators/[id]');
  if (operator instanceof Response) return operator;
  const id = idSchema.safeParse((await context.params).id);
  if (!id.success) return invalid(id.error);
  const change = await parseBody(request, operatorChangeSchema);
  if (change instanceof Response) return change;
  try {
    return adminJson(await changeOperator(dashboardPool(), id.data, change, operator));
  } catch (error) {
    return problemFor(error, { OPERATOR_NOT_FOUND: 404, LAST_ADMIN: 409, ACTOR_REFUSED: 403 });
  }
}

export const PATCH = handled('/api/admin/operators/[id]', patch);
