// POST /api/account/password {currentPassword, newPassword, confirmation}: the signed-in
// operator changes their own password (any role). The current one is checked (and counted like a
// sign-in attempt); every other session of theirs ends; audited (operator.password_change).
import { randomUUID } from 'node:crypto';
import { adminJson, problemFor, parseBody } from '@/app/_lib/admin-http';
import { authPool, authorizeRoute, dashboardPool } from '@/app/_lib/dashboard';
import { changeOwnPassword, PasswordLockedError, passwordChangeSchema, WrongPasswordError } from '@/server/auth/operators';
import { problemResponse } from '@retrysafe/store';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

async function post(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/account/password');
  if (operator instanceof Response) return operator;
  const change = await parseBody(request, passwordChangeSchema);
  if (change instanceof Response) return change;
  try {
    return adminJson(await changeOwnPassword(dashboardPool(), authPool(), operator, change));
  } catch (error) {
    if (error instanceof WrongPasswordError) {
      return problemResponse(
        { status: 400, slug: 'wrong-password', title: error.message, errors: [{ path: 'currentPassword', message: error.message }] },
        randomUUID(),
      );
    }
    if (error instanceof PasswordLockedError) {
      return problemResponse(
        { status: 429, slug: 'password-locked', title: error.message, headers: { 'Retry-After': String(error.retryAfterSeconds) } },
        randomUUID(),
      );
    }
    return problemFor(error, { ACTOR_REFUSED: 401 });
  }
}

export const POST = handled('/api/account/password', post);
