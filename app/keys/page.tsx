// /keys (operator): look up one principal's key, metadata only, audited; find a principal by
// name or a request by its correlation id. Links from the overview's principals table prefill
// the principal and the key list's scope and state.
import { requirePageOperator, dashboardReadPool } from '@/app/_lib/dashboard';
import { knownScopes } from '@/server/retention/policies';
import { KeyLookup } from '@/components/keys/key-lookup';
import { serviceNameSchema } from '@/server/service-name';
import { keyListSchema } from '@/server/idempotency/key-metadata';

const keyStateSchema = keyListSchema.shape.state.unwrap();

export const dynamic = 'force-dynamic';

export default async function KeysPage({ searchParams }: { searchParams: Promise<Record<string, string | string[] | undefined>> }) {
  await requirePageOperator('/keys');
  // Links from other pages prefill the principal and key; a lookup still needs a reason, so none runs by itself.
  const params = await searchParams;
  const text = (value: string | string[] | undefined) => (typeof value === 'string' ? value.slice(0, 255) : '');
  return (
    <main id="content" tabIndex={-1} className="wide">
      <h1>Key lookup</h1>
      <p className="muted">What the store holds for one tenant&apos;s idempotency key, in every service and scope: state, timing and sizes, never the response itself.</p>
      <KeyLookup
        initialPrincipalId={text(params.principalId)}
        initialKey={text(params.key)}
        initialService={serviceNameSchema.safeParse(params.service).data ?? ''}
        initialScope={text(params.scope).slice(0, 200)}
        initialState={keyStateSchema.safeParse(params.state).data ?? ''}
        scopes={await knownScopes(dashboardReadPool())}
      />
    </main>
  );
}
