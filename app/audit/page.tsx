// /audit (compliance): the audit log, filtered from the URL, first page prefetched through
// the dashboard's role; older pages and the CSV export go through /api/admin/audit.
import { dehydrate, HydrationBoundary, QueryClient } from '@tanstack/react-query';
import { requirePageOperator, dashboardReadPool } from '@/app/_lib/dashboard';
import { AuditLog } from '@/components/audit/audit-log';
import { parseAuditSearch } from '@/components/audit/search';
import { AUDIT_PAGE_SIZE } from '@/components/audit/search-params';
import { queryKeys } from '@/components/query-keys';
import { listAudit } from '@/server/audit/query';
import { reportPrefetchFailure } from '@/server/prefetch';

export const dynamic = 'force-dynamic';

export default async function AuditPage({ searchParams }: { searchParams: Promise<Record<string, string | string[] | undefined>> }) {
  await requirePageOperator('/audit');
  const search = parseAuditSearch(await searchParams);
  const client = new QueryClient();
  // A failed read leaves the cache empty (the client shows its error state and retries) and is logged.
  await client
    .infiniteQuery({
      queryKey: queryKeys.auditLog(search),
      queryFn: () => listAudit(dashboardReadPool(), { ...search, limit: AUDIT_PAGE_SIZE }),
      initialPageParam: null as string | null,
      getNextPageParam: (last) => last.next,
    })
    .catch(reportPrefetchFailure('/audit'));
  return (
    <main id="content" tabIndex={-1} className="wide">
      <h1>Audit log</h1>
      <p className="muted">Who did what, when and why: sign-ins, key lookups, claim releases, operator and policy changes, exports. Newest first; it cannot be edited.</p>
      <HydrationBoundary state={dehydrate(client)}>
        <AuditLog search={search} />
      </HydrationBoundary>
    </main>
  );
}
