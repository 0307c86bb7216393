// GET /api/health: 200 when the database answers and the schema is current, else 503.
import { checkHealth } from '@/server/health';
import { ownerPool } from '@/app/_lib/runtime';

export const dynamic = 'force-dynamic';

export async function GET(): Promise<Response> {
  const report = await checkHealth(ownerPool());
  return Response.json(report, {
    status: report.status === 'ok' ? 200 : 503,
    headers: { 'Cache-Control': 'no-store' },
  });
}
