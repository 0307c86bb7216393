// /retention[?service=] (compliance; admins also edit): policies against their promise,
// history, evidence and capacity, of every service or of one.
import { dehydrate, HydrationBoundary, QueryClient } from '@tanstack/react-query';
import { requiredRole } from '@/app/_lib/access';
import { requirePageOperator, dashboardReadPool } from '@/app/_lib/dashboard';
import { queryKeys } from '@/components/query-keys';
import { RetentionReview } from '@/components/retention/retention-review';
import { roleIncludes } from '@/server/auth/roles';
import { readRetentionReview } from '@/server/retention/review';
import { checkServiceFilter } from '@/server/service-filter';
import { reportPrefetchFailure } from '@/server/prefetch';
import { runtime } from '@/app/_lib/runtime';

export const dynamic = 'force-dynamic';

export default async function RetentionPage({ searchParams }: { searchParams: Promise<Record<string, string | string[] | undefined>> }) {
  const operator = await requirePageOperator('/retention');
  const params = await searchParams;
  const asked = Array.isArray(params.service) ? params.service[0] : params.service;
  // A service no policy names is said so on the page (which then corrects its URL), rather
  // than showing every service under an address that names one; a failed check is logged and
  // the review's own read (which checks the service again) shows the error state.
  const { service, notices } = await checkServiceFilter(dashboardReadPool(), asked, '/retention');
  const client = new QueryClient();
  const { alertThresholds, databaseMemoryBytes } = await runtime();
  const settings = { databaseMemoryBytes, indexOverMemoryShare: alertThresholds.indexOverMemoryShare };
  await client.query({ queryKey: queryKeys.retention(service ?? null), queryFn: () => readRetentionReview(dashboardReadPool(), service, settings) }).catch(reportPrefetchFailure('/retention'));
  return (
    <main id="content" tabIndex={-1} className="wide">
      <h1>Retention review</h1>
      <p className="muted">A retry with the same key is safe for the documented window; keys are kept for the retention applied. Expiry must never come before the promise.</p>
      <HydrationBoundary state={dehydrate(client)}>
        <RetentionReview canEdit={roleIncludes(operator.role, requiredRole('/api/admin/policies'))} service={service ?? null} notices={notices} />
      </HydrationBoundary>
    </main>
  );
}
