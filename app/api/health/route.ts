// GET /api/health: 200 when the database answers and the schema is current, else 503. Anyone
// gets the status; the details (Postgres version, migrations, latency) a signed-in operator or
// whoever may read /api/metrics: with METRICS_TOKEN set, its holder, so a stranger does not learn
// what the server runs; with it unset, anyone, as /api/metrics is open then (one rule, metricsAuthorized).
import { misdirected } from '@/app/_lib/host';
import { currentOperator } from '@/app/_lib/dashboard';
import { ownerPool } from '@/app/_lib/runtime';
import { readEnvironment } from '@/server/config';
import { checkHealth } from '@/server/health';
import { metricsAuthorized } from '@/server/metrics/prometheus';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

async function get(request: Request): Promise<Response> {
  const refused = misdirected(request.headers);
  if (refused) return refused;
  const report = await checkHealth(ownerPool());
  const detailed = metricsAuthorized(request.headers.get('authorization'), readEnvironment().METRICS_TOKEN) || (await currentOperator().catch(() => null)) !== null;
  return Response.json(detailed ? report : { status: report.status }, {
    status: report.status === 'ok' ? 200 : 503,
    headers: { 'Cache-Control': 'no-store' },
  });
}

export const GET = handled('/api/health', get);
