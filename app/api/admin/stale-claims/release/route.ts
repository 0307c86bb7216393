// POST /api/admin/stale-claims/release {principalId, service, scope, key, reason}: mark one stale claim
// failed (retryable) through the store's KeyRecordReads, audited (operator).
import { adminJson, problemFor, parseBody } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardKeys } from '@/app/_lib/dashboard';
import { staleReleaseSchema } from '@/server/idempotency/key-metadata';
import { releaseStaleClaim } from '@/server/retention/stale-claims';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

async function post(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/stale-claims/release');
  if (operator instanceof Response) return operator;
  const parsed = await parseBody(request, staleReleaseSchema);
  if (parsed instanceof Response) return parsed;
  const { reason, ...id } = parsed;
  try {
    await releaseStaleClaim(dashboardKeys(), id, operator.email, reason);
    return adminJson({ released: true });
  } catch (error) {
    return problemFor(error, { CLAIM_NOT_STALE: 409, KEY_READ_UNSUPPORTED: 501 });
  }
}

export const POST = handled('/api/admin/stale-claims/release', post);
