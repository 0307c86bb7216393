// POST /api/admin/operators/:id/password {reason}: an admin resets another operator's password
// to a generated one, answered once (no-store) and never logged; every session of that
// operator ends. Audited with the reason, by the database, as the admin whose session it checked.
import { storableText } from '@/server/storable';
import { adminJson, invalid, problemFor, parseBody } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardPool } from '@/app/_lib/dashboard';
import { passwordResetSchema, resetOperatorPassword } from '@/server/auth/operators';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

const idSchema = storableText().min(1).max(64);

async function post(request: Request, context: { params: Promise<{ id: string }> }): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/operators/[id]/password');
  if (operator instanceof Response) return operator;
  const id = idSchema.safeParse((await context.params).id);
  if (!id.success) return invalid(id.error);
  const input = await parseBody(request, passwordResetSchema);
  if (input instanceof Response) return input;
  try {
    return adminJson(await resetOperatorPassword(dashboardPool(), id.data, input, operator));
  } catch (error) {
    return problemFor(error, { OPERATOR_NOT_FOUND: 404, ACTOR_REFUSED: 403, OWN_PASSWORD_RESET: 409 });
  }
}

export const POST = handled('/api/admin/operators/[id]/password', post);
