// GET /api/metrics: Prometheus text exposition; needs `Authorization: Bearer $METRICS_TOKEN` when it is set.
import { randomUUID } from 'node:crypto';
import { misdirected } from '@/app/_lib/host';
import { runtime } from '@/app/_lib/runtime';
import { problemResponse } from '@retrysafe/store';
import { metricsAuthorized } from '@/server/metrics/prometheus';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

async function get(request: Request): Promise<Response> {
  const refused = misdirected(request.headers);
  if (refused) return refused;
  const services = await runtime();
  if (!metricsAuthorized(request.headers.get('authorization'), services.metricsToken)) {
    return problemResponse(
      { status: 401, slug: 'unauthenticated', title: 'A valid metrics token is required', headers: { 'WWW-Authenticate': 'Bearer' } },
      randomUUID(),
    );
  }
  const body = await services.prometheus.registry.metrics();
  return new Response(body, { headers: { 'Content-Type': services.prometheus.registry.contentType, 'Cache-Control': 'no-store' } });
}

export const GET = handled('/api/metrics', get);
