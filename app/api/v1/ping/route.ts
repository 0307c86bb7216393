// POST /api/v1/ping: reads the JSON body and answers 200 without touching the database or the
// store. A liveness probe of the HTTP layer alone, and the baseline `npm run bench -- http`
// sets the payments API against (same server, same request shape), so the store's share of a
// request's cost shows.
import { randomUUID } from 'node:crypto';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

async function post(request: Request): Promise<Response> {
  await request.arrayBuffer();
  return Response.json({ ok: true }, { headers: { 'Cache-Control': 'no-store', 'X-Correlation-Id': randomUUID() } });
}

export const POST = handled('/api/v1/ping', post);
