// /claims (operator): stale claims, prefetched through the dashboard's role.
import { dehydrate, HydrationBoundary, QueryClient } from '@tanstack/react-query';
import { dashboardKeys, requirePageOperator } from '@/app/_lib/dashboard';
import { StaleClaims } from '@/components/claims/stale-claims';
import { queryKeys, STALE_CLAIMS_SHOWN } from '@/components/query-keys';
import { listStaleClaims } from '@/server/idempotency/key-metadata';
import { reportPrefetchFailure } from '@/server/prefetch';

export const dynamic = 'force-dynamic';

export default async function ClaimsPage() {
  await requirePageOperator('/claims');
  const client = new QueryClient();
  // A failed read leaves the cache empty (the client shows its error state and retries) and is logged.
  await client
    .query({ queryKey: queryKeys.staleClaims(), queryFn: () => listStaleClaims(dashboardKeys().reads, STALE_CLAIMS_SHOWN) })
    .catch(reportPrefetchFailure('/claims'));
  return (
    <main className="wide">
      <h1>Stale claims</h1>
      <p className="muted">In-progress attempts whose lease has passed: the handler crashed or hung mid-work. A retry takes such a key over by itself; the sweeper releases them 15 minutes after their lease.</p>
      <HydrationBoundary state={dehydrate(client)}>
        <StaleClaims />
      </HydrationBoundary>
    </main>
  );
}
