// /claims[?service=] (operator): stale claims of every service or of one, prefetched through the
// dashboard's role.
import { dehydrate, HydrationBoundary, QueryClient } from '@tanstack/react-query';
import { dashboardKeys, requirePageOperator, dashboardReadPool } from '@/app/_lib/dashboard';
import { StaleClaims } from '@/components/claims/stale-claims';
import { queryKeys, STALE_CLAIMS_SHOWN } from '@/components/query-keys';
import { listStaleClaims } from '@/server/idempotency/key-metadata';
import { reportPrefetchFailure } from '@/server/prefetch';
import { policyServices } from '@/server/retention/review';

export const dynamic = 'force-dynamic';

export default async function ClaimsPage({ searchParams }: { searchParams: Promise<Record<string, string | string[] | undefined>> }) {
  await requirePageOperator('/claims');
  const params = await searchParams;
  const asked = Array.isArray(params.service) ? params.service[0] : params.service;
  // The Service picker's choices; a service no policy names is said so on the page (which then
  // corrects its URL), rather than listing every service's claims under an address naming one.
  const services = await policyServices(dashboardReadPool()).catch((error: unknown) => {
    reportPrefetchFailure('/claims')(error);
    return null;
  });
  const service = asked && services?.includes(asked) ? asked : undefined;
  const notices = asked && services && !services.includes(asked) ? [`There is no service "${asked.slice(0, 80)}": showing all services.`] : [];
  const client = new QueryClient();
  // A failed read leaves the cache empty (the client shows its error state and retries) and is logged.
  await client
    .query({ queryKey: queryKeys.staleClaims(service ?? null), queryFn: () => listStaleClaims(dashboardKeys(), STALE_CLAIMS_SHOWN, service) })
    .catch(reportPrefetchFailure('/claims'));
  return (
    <main id="content" tabIndex={-1} className="wide">
      <h1>Stale claims</h1>
      <p className="muted">In-progress attempts whose lease has passed: the handler crashed or hung mid-work. A retry takes such a key over by itself. Kept in Postgres, the sweeper releases them 15 minutes after their lease; kept in MySQL, the service's own sweep (sweepMysql) does; kept in Redis, only the next retry does.</p>
      <HydrationBoundary state={dehydrate(client)}>
        <StaleClaims service={service ?? null} services={services ?? []} notices={notices} />
      </HydrationBoundary>
    </main>
  );
}
