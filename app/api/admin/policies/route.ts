// POST /api/admin/policies {service, endpoint, expectedVersion, fields, reason, acknowledgeBreakingChange?}:
// an admin changes a service's endpoint policy; history and audit in the same transaction. Retention
// below the documented window is refused; shortening the window or changing the scope needs
// the breaking change acknowledged.
import { z } from 'zod';
import { storableText } from '@/server/storable';
import { adminJson, problemFor, parseBody } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardPool } from '@/app/_lib/dashboard';
import { changePolicy } from '@/server/retention/policies';
import { handled } from '@/app/_lib/route-errors';
import { serviceNameSchema } from '@/server/service-name';

export const dynamic = 'force-dynamic';

const changeSchema = z.strictObject({
  service: serviceNameSchema,
  endpoint: storableText().min(1).max(200),
  expectedVersion: z.number().int().positive(),
  fields: z.record(z.string(), z.unknown()),
  reason: storableText().trim().min(3, 'say why the policy changes').max(1000),
  acknowledgeBreakingChange: z.boolean().optional(),
});

async function post(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/policies');
  if (operator instanceof Response) return operator;
  const parsed = await parseBody(request, changeSchema);
  if (parsed instanceof Response) return parsed;
  try {
    const result = await changePolicy(dashboardPool(), { ...parsed, actor: operator.email });
    return adminJson({ policy: { ...result.policy, updatedAt: result.policy.updatedAt.toISOString() }, breaking: result.breaking });
  } catch (error) {
    return problemFor(error, { INVALID_POLICY: 400, BREAKING_CHANGE_NOT_ACKNOWLEDGED: 409, POLICY_VERSION_CONFLICT: 409, POLICY_NOT_FOUND: 404 });
  }
}

export const POST = handled('/api/admin/policies', post);
