// Home: what this instance is and whether its database is fit to serve.
import { checkHealth } from '@/server/health';
import { ownerPool } from '@/app/_lib/runtime';
import { requirePageOperator } from '@/app/_lib/dashboard';

export const dynamic = 'force-dynamic';

export default async function HomePage() {
  await requirePageOperator('/');
  const health = await checkHealth(ownerPool());
  const ok = health.status === 'ok';
  return (
    <main>
      <h1>Retrysafe</h1>
      <p className="muted">Idempotency keys on Postgres: retries within the published window are safe.</p>
      <section className="card" aria-labelledby="status-heading">
        <h2 id="status-heading">Instance status</h2>
        <dl>
          <dt>Status</dt>
          <dd className={ok ? 'ok' : 'bad'}>{health.status}</dd>
          <dt>Database</dt>
          <dd>
            {health.database.reachable
              ? `reachable, PostgreSQL ${health.database.serverVersion ?? 'unknown'} (${health.database.latencyMs ?? '?'} ms)`
              : `unreachable (${health.database.error ?? 'no answer'})`}
          </dd>
          <dt>Schema</dt>
          <dd>
            {health.migrations
              ? `${health.migrations.current ?? 'empty'}${health.migrations.pending.length > 0 ? `, ${health.migrations.pending.length} pending` : ', up to date'}`
              : 'unknown'}
          </dd>
        </dl>
      </section>
      <p className="muted">
        Machine-readable: <a href="/api/health">/api/health</a>
      </p>
    </main>
  );
}
