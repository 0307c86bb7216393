// The reconciler's findings (migration 0027) are read through their indexes, whatever their
// number: the run's re-check of its service's findings (least recently checked first, stopped at
// the budget) by reconcile_findings_service_idx, the dashboard's counts and list of one service by
// the same index's prefix, and the sweep by reconcile_findings_expiry_idx. Each statement is
// unnamed (planned with its values at each run); proven by EXPLAIN on a new, never-analyzed
// table, then on one with 200 services' findings, analyzed.
import { describe, expect, it } from 'vitest';
import { reconcileStatementTexts } from '@retrysafe/store/redis';
import { explainPrepared as explain, type PlanNode } from '../../packages/store/test/helpers/plan';
import { findingCountsText, findingsText } from '../../server/idempotency/reconcile';
import { sweepAttemptsTexts } from '../../server/retention/sweeper';
import { useTestDatabase } from '../helpers/database';

const SERVICES = 200;
const PER_SERVICE = 1_000;

describe('reconciliation findings: plans', () => {
  const db = useTestDatabase();

  const statements = (young: boolean): { name: string; text: string; values: unknown[]; index: string }[] => [
    { name: 'the run re-checks its findings', text: reconcileStatementTexts.recheck, values: ['svc-7', 100], index: 'reconcile_findings_service_idx' },
    { name: 'counts of one service', text: findingCountsText, values: ['svc-7'], index: 'reconcile_findings_service_idx' },
    { name: 'list of one service and kind', text: findingsText, values: ['svc-7', null, 'effect_missing', 101], index: 'reconcile_findings_service_idx' },
    ...(young ? [] : [{ name: 'sweep', text: sweepAttemptsTexts.findings, values: [1000], index: 'reconcile_findings_expiry_idx' }]),
  ];

  const check = async (young: boolean) => {
    const client = await db.pool.connect();
    try {
      await client.query('SET search_path = retrysafe, public');
      for (const statement of statements(young)) {
        const plan: PlanNode[] = await explain(client, statement.text, statement.values, 'force_custom_plan');
        const onTable = plan.filter((node) => node['Relation Name'] === 'reconcile_findings');
        expect(onTable.length, statement.name).toBeGreaterThan(0);
        expect(onTable.filter((node) => node['Node Type'] === 'Seq Scan'), statement.name).toEqual([]);
        expect(plan.some((node) => node['Index Name'] === statement.index), `${statement.name} uses ${statement.index}`).toBe(true);
      }
    } finally {
      await client.query('RESET search_path').catch(() => undefined);
      client.release();
    }
  };

  it('reads through the indexes on a new, never-analyzed table', async () => {
    await check(true);
  });

  it(`reads through the indexes with ${(SERVICES * PER_SERVICE).toLocaleString('en')} findings of ${SERVICES} services, analyzed`, async () => {
    await db.pool.query(
      `INSERT INTO retrysafe.reconcile_findings (principal_id, service, scope, key, kind, effect, correlation_id, attempts, created_at, expires_at, found_at, checked_at)
       SELECT gen_random_uuid(), 'svc-' || (i % $1), 'POST /x', 'key-' || i, (ARRAY['effect_missing', 'stale_claim'])[1 + i % 2], 'missing', gen_random_uuid()::text, 1,
              now() - interval '1 hour', now() + (i % 86400) * interval '1 second', now() - (i % 3600) * interval '1 second', now() - (i % 3600) * interval '1 second'
       FROM generate_series(1, $2::int) AS i`,
      [SERVICES, SERVICES * PER_SERVICE],
    );
    await db.pool.query('ANALYZE retrysafe.reconcile_findings');
    await check(false);
  });
});
