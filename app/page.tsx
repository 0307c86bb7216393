// The overview (viewer): prefetched on the server through the dashboard's role, then kept
// fresh by React Query under the same key.
import { dehydrate, HydrationBoundary, QueryClient } from '@tanstack/react-query';
import { requirePageOperator, dashboardKeys, dashboardReadPool, dashboardReplicaLag } from '@/app/_lib/dashboard';
import { runtime } from '@/app/_lib/runtime';
import { OverviewDashboard } from '@/components/overview/overview-dashboard';
import { parseOverviewSearch } from '@/components/overview/search';
import { queryKeys } from '@/components/query-keys';
import { overviewQuery, readOverview, type OverviewJson } from '@/server/metrics/overview';
import { knownOverviewNames } from '@/server/metrics/overview-names';
import { reportPrefetchFailure } from '@/server/prefetch';

export const dynamic = 'force-dynamic';

export default async function OverviewPage({ searchParams }: { searchParams: Promise<Record<string, string | string[] | undefined>> }) {
  await requirePageOperator('/');
  const params = await searchParams;
  const first = (value: string | string[] | undefined) => (Array.isArray(value) ? value[0] : value);
  // An unknown range, service or scope is corrected here and said so on the page (which then
  // corrects its URL), rather than showing everything under a URL that names something else.
  const names = await knownOverviewNames(dashboardReadPool(), { service: first(params.service), scope: first(params.scope) });
  const { search, notices } = parseOverviewSearch(params, names);
  const { alertThresholds, sweepIntervalSeconds, databaseMemoryBytes } = await runtime();
  const client = new QueryClient();
  // A failed read leaves the cache empty (the client shows its error state and retries) and is logged.
  await client
    .query({
      queryKey: queryKeys.overview(search),
      // As the client would receive it from /api/admin/overview (the same zod check, the same
      // read): dates as strings.
      queryFn: async () =>
        JSON.parse(
          JSON.stringify(
            await readOverview(
              dashboardReadPool(),
              overviewQuery.parse({ range: search.range, service: search.service, scope: search.scope, from: search.from, to: search.to, compare: search.compare }),
              alertThresholds,
              sweepIntervalSeconds,
              { replicaLag: dashboardReplicaLag(), databaseMemoryBytes, storeFigures: dashboardKeys().storeFigures, staleElsewhere: dashboardKeys().staleElsewhere },
            ),
          ),
        ) as OverviewJson,
    })
    .catch(reportPrefetchFailure('/'));
  return (
    <main id="content" tabIndex={-1} className="wide">
      <h1>Overview</h1>
      <p className="muted">Is idempotency working right now? The store against its baseline, cleanup, claim latency and how clients retry.</p>
      <HydrationBoundary state={dehydrate(client)}>
        <OverviewDashboard search={search} notices={notices} />
      </HydrationBoundary>
    </main>
  );
}
