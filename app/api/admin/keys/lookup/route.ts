// POST /api/admin/keys/lookup {principalId, key, reason}: every scope's metadata for one
// principal's key (operator), never a response body; audited with the reason. A foreign
// key and an absent one both answer { records: [] }.
import { adminJson, parseBody } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardKeys } from '@/app/_lib/dashboard';
import { keyLookupSchema, lookUpKey } from '@/server/idempotency/key-metadata';
import { handled } from '@/app/_lib/route-errors';
import { unansweredServices } from '@/server/unanswered-services';

export const dynamic = 'force-dynamic';

async function post(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/keys/lookup');
  if (operator instanceof Response) return operator;
  const parsed = await parseBody(request, keyLookupSchema);
  if (parsed instanceof Response) return parsed;
  const records = await lookUpKey(dashboardKeys(), parsed, operator.email);
  // Named when a key backend did not answer (no service named): their keys are not in records.
  const unavailable = unansweredServices(records);
  return adminJson({ records, ...(unavailable.length > 0 ? { unavailable } : {}) });
}

export const POST = handled('/api/admin/keys/lookup', post);
