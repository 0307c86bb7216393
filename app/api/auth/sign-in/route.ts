// POST /api/auth/sign-in {email, password}: the sign-in form's server action over plain HTTP,
// for scripts and tests. 204 with the session and device cookies; 401 for a wrong email or
// password (one answer for both); 429 with Retry-After while locked out or while every
// password-hashing slot is busy. Same-origin only (a login CSRF would sign a browser in as
// someone else). The client address is the one the HTTP front resolved (TRUST_PROXY).
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { parseBody } from '@/app/_lib/admin-http';
import { dashboardPool, operatorAuth, sameOrigin } from '@/app/_lib/dashboard';
import { misdirected } from '@/app/_lib/host';
import { signInOperator } from '@/server/auth/operator-auth';
import { clientAddressOf } from '@/server/client-address';
import { problemResponse } from '@retrysafe/store';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

const bodySchema = z.strictObject({ email: z.string().min(1).max(254), password: z.string().min(1).max(1_024) });

async function post(request: Request): Promise<Response> {
  const correlationId = randomUUID();
  const refused = misdirected(request.headers);
  if (refused) return refused;
  if (!sameOrigin(request)) return problemResponse({ status: 403, slug: 'cross-origin', title: 'Cross-origin request refused' }, correlationId);
  const body = await parseBody(request, bodySchema);
  if (body instanceof Response) return body;
  const result = await signInOperator(operatorAuth(), dashboardPool(), body, { headers: request.headers, address: clientAddressOf(request.headers) });
  if (result.ok) {
    const headers = new Headers({ 'Cache-Control': 'no-store', 'X-Correlation-Id': correlationId });
    for (const line of result.setCookie) headers.append('Set-Cookie', line);
    return new Response(null, { status: 204, headers });
  }
  if (result.reason === 'invalid') return problemResponse({ status: 401, slug: 'sign-in-failed', title: 'Wrong email or password, or the account is disabled' }, correlationId);
  return problemResponse(
    {
      status: 429,
      slug: result.reason === 'busy' ? 'sign-in-busy' : 'sign-in-locked',
      title: result.reason === 'busy' ? 'Too many sign-ins in progress' : 'Too many failed sign-ins',
      detail: `Try again in ${result.retryAfterSeconds} s.`,
      headers: { 'Retry-After': String(result.retryAfterSeconds) },
    },
    correlationId,
  );
}

export const POST = handled('/api/auth/sign-in', post);
