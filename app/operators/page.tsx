// /operators (admin): who may sign in to the dashboard and with which role, prefetched
// through the dashboard's role; changes go through /api/admin/operators, each audited.
import { dehydrate, HydrationBoundary, QueryClient } from '@tanstack/react-query';
import { requirePageOperator, dashboardReadPool } from '@/app/_lib/dashboard';
import { Operators, type OperatorJson } from '@/components/operators/operators';
import { queryKeys } from '@/components/query-keys';
import { listOperators } from '@/server/auth/operators';
import { reportPrefetchFailure } from '@/server/prefetch';

export const dynamic = 'force-dynamic';

export default async function OperatorsPage() {
  const you = await requirePageOperator('/operators');
  const client = new QueryClient();
  // A failed read leaves the cache empty (the client shows its error state and retries) and is logged.
  await client
    .query({
      queryKey: queryKeys.operators(),
      // As the client would receive it from /api/admin/operators: dates as strings.
      queryFn: async () => JSON.parse(JSON.stringify(await listOperators(dashboardReadPool()))) as OperatorJson[],
    })
    .catch(reportPrefetchFailure('/operators'));
  return (
    <main id="content" tabIndex={-1} className="wide">
      <h1>Operators</h1>
      <p className="muted">Who can sign in to this dashboard, and with which role. Every change needs a reason and is recorded in the audit log.</p>
      <HydrationBoundary state={dehydrate(client)}>
        <Operators youId={you.id} />
      </HydrationBoundary>
    </main>
  );
}
