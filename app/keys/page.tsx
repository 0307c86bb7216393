// /keys (operator): look up one principal's key, metadata only, audited.
import { requirePageOperator } from '@/app/_lib/dashboard';
import { KeyLookup } from '@/components/keys/key-lookup';

export const dynamic = 'force-dynamic';

export default async function KeysPage() {
  await requirePageOperator('/keys');
  return (
    <main className="wide">
      <h1>Key lookup</h1>
      <p className="muted">What the store holds for one tenant&apos;s idempotency key, in every scope: state, timing and sizes, never the response itself.</p>
      <KeyLookup />
    </main>
  );
}
