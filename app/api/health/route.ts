// GET /api/health: 200 when the database answers and the schema is current, else 503. Anyone
// gets the status; the details (Postgres version, migrations, latency) only a signed-in
// operator or a METRICS_TOKEN holder, so a stranger does not learn what the server runs.
import { timingSafeEqual } from 'node:crypto';
import { misdirected } from '@/app/_lib/host';
import { currentOperator } from '@/app/_lib/dashboard';
import { ownerPool } from '@/app/_lib/runtime';
import { readEnvironment } from '@/server/config';
import { checkHealth } from '@/server/health';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

function holdsMetricsToken(authorization: string | null): boolean {
  const token = readEnvironment().METRICS_TOKEN;
  if (!token || !authorization?.startsWith('Bearer ')) return false;
  const given = Buffer.from(authorization.slice('Bearer '.length));
  const expected = Buffer.from(token);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

async function get(request: Request): Promise<Response> {
  const refused = misdirected(request.headers);
  if (refused) return refused;
  const report = await checkHealth(ownerPool());
  const detailed = holdsMetricsToken(request.headers.get('authorization')) || (await currentOperator().catch(() => null)) !== null;
  return Response.json(detailed ? report : { status: report.status }, {
    status: report.status === 'ok' ? 200 : 503,
    headers: { 'Cache-Control': 'no-store' },
  });
}

export const GET = handled('/api/health', get);
