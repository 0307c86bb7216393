// The unrecorded completions' reads (migration 0026) are served by their indexes: the overview's
// count per service over the last hour and the operator's list, newest first, by
// unrecorded_completions_at_idx; the sweep by unrecorded_completions_expiry_idx. Proven by EXPLAIN
// in custom and generic plan mode on a new, never-analyzed table and again on one large enough
// for the planner to prefer a sequential scan if it could.
import { describe, expect, it } from 'vitest';
import { explainPrepared as explain, type PlanNode } from '../../packages/store/test/helpers/plan';
import { alertUnrecordedText } from '../../server/metrics/alerts';
import { unrecordedListText } from '../../server/idempotency/unrecorded';
import { sweepAttemptsTexts } from '../../server/retention/sweeper';
import { useTestDatabase } from '../helpers/database';

const ROWS = 200_000;

describe('unrecorded completions: plans', () => {
  const db = useTestDatabase();

  // The sweep's statement is unnamed (planned afresh on each run, with the table's statistics of
  // the moment), so no plan chosen while the table was young can follow it: proven on the large one.
  const statements = (young = false): { name: string; text: string; values: unknown[]; index: string }[] => [
    { name: 'count per service (database clock)', text: alertUnrecordedText, values: [null, 60], index: 'unrecorded_completions_at_idx' },
    { name: 'count per service (caller clock)', text: alertUnrecordedText, values: [new Date(), 60], index: 'unrecorded_completions_at_idx' },
    { name: 'list of one service', text: unrecordedListText, values: [60, 'orders', 101], index: 'unrecorded_completions_at_idx' },
    { name: 'list of every service', text: unrecordedListText, values: [10_080, null, 501], index: 'unrecorded_completions_at_idx' },
    ...(young ? [] : [{ name: 'sweep', text: sweepAttemptsTexts.unrecorded, values: [1000], index: 'unrecorded_completions_expiry_idx' }]),
  ];

  const check = async (young = false) => {
    const client = await db.pool.connect();
    try {
      for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
        for (const statement of statements(young)) {
          const plan: PlanNode[] = await explain(client, statement.text, statement.values, mode);
          const onTable = plan.filter((node) => node['Relation Name'] === 'unrecorded_completions');
          expect(onTable.length, `${statement.name} (${mode})`).toBeGreaterThan(0);
          expect(onTable.filter((node) => node['Node Type'] === 'Seq Scan'), `${statement.name} (${mode})`).toEqual([]);
          expect(plan.some((node) => node['Index Name'] === statement.index), `${statement.name} (${mode}) uses ${statement.index}`).toBe(true);
        }
      }
    } finally {
      client.release();
    }
  };

  it("serves each of the dashboard's (named) reads by its index on a new, never-analyzed table", async () => {
    await check(true);
  });

  it(`serves each read and the sweep by its index with ${ROWS.toLocaleString('en')} rows over a week, analyzed`, async () => {
    await db.pool.query(
      `INSERT INTO retrysafe.unrecorded_completions (principal_id, service, scope, key, correlation_id, at, expires_at, error_class)
       SELECT ('00000000-0000-0000-0000-' || lpad((i % 1000)::text, 12, '0'))::uuid, (ARRAY['orders', 'demo', 'billing', 'ledger'])[1 + i % 4], 'POST /x', 'key-' || i,
              gen_random_uuid(), now() - (i * 3) * interval '1 second', now() + (i % 86400) * interval '1 second', 'DatabaseError 42501'
       FROM generate_series(1, $1::int) AS i`,
      [ROWS],
    );
    await db.pool.query('ANALYZE retrysafe.unrecorded_completions');
    await check();
  });
});
