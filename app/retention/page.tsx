// /retention (compliance; admins also edit): policies against their promise, history, evidence.
import { dehydrate, HydrationBoundary, QueryClient } from '@tanstack/react-query';
import { requiredRole } from '@/app/_lib/access';
import { dashboardPool, requirePageOperator } from '@/app/_lib/dashboard';
import { queryKeys } from '@/components/query-keys';
import { RetentionReview } from '@/components/retention/retention-review';
import { roleIncludes } from '@/server/auth/roles';
import { readRetentionReview } from '@/server/retention/review';
import { reportPrefetchFailure } from '@/server/prefetch';

export const dynamic = 'force-dynamic';

export default async function RetentionPage() {
  const operator = await requirePageOperator('/retention');
  const client = new QueryClient();
  await client.query({ queryKey: queryKeys.retention(), queryFn: () => readRetentionReview(dashboardPool()) }).catch(reportPrefetchFailure('/retention'));
  return (
    <main className="wide">
      <h1>Retention review</h1>
      <p className="muted">A retry with the same key is safe for the documented window; keys are kept for the retention applied. Expiry must never come before the promise.</p>
      <HydrationBoundary state={dehydrate(client)}>
        <RetentionReview canEdit={roleIncludes(operator.role, requiredRole('/api/admin/policies'))} />
      </HydrationBoundary>
    </main>
  );
}
