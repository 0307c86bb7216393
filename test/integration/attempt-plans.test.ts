// The trace of attempts' dashboard reads and sweep are served by their indexes (migration 0025),
// proven by EXPLAIN in custom and generic plan mode on new, never-analyzed tables and again on
// tables large enough for the planner to prefer a sequential scan if it could.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { explainPrepared as explain, type PlanNode } from '../../packages/store/test/helpers/plan';
import { attemptStatementTexts } from '../../server/idempotency/attempts';
import { sweepAttemptsTexts } from '../../server/retention/sweeper';
import { useTestDatabase } from '../helpers/database';

const PRINCIPALS = 1000;
const KEYS = 200_000;

const principalOf = (i: number) => `00000000-0000-0000-0000-${String(i % PRINCIPALS).padStart(12, '0')}`;

describe('trace of attempts: plans', () => {
  const db = useTestDatabase();

  // The sweep's statements are unnamed (planned afresh on each run, with the table's statistics of
  // the moment), so no plan chosen while the table was young can follow it: proven on the large one.
  const statements = (young = false): { name: string; text: string; values: unknown[]; index: string | string[] }[] => [
    { name: 'key traces', text: attemptStatementTexts.keyTraces, values: [principalOf(7), 'key-7', ['demo', 'orders'], ['POST /x', 'POST /x']], index: ['key_attempts_pkey', 'key_attempt_counts_pkey'] },
    { name: 'correlation attempts', text: attemptStatementTexts.correlationAttempts, values: [randomUUID()], index: 'key_attempts_correlation_idx' },
    { name: 'page counts', text: attemptStatementTexts.pageCounts, values: [principalOf(7), ['demo', 'demo'], ['POST /x', 'POST /x'], ['key-7', 'key-1007']], index: 'key_attempt_counts_pkey' },
    ...(young
      ? []
      : [
          { name: 'sweep attempts', text: sweepAttemptsTexts.attempts, values: [1000], index: 'key_attempts_expiry_idx' },
          { name: 'sweep counts', text: sweepAttemptsTexts.counts, values: [1000], index: 'key_attempt_counts_expiry_idx' },
        ]),
  ];

  const check = async (young = false) => {
    const client = await db.pool.connect();
    try {
      for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
        for (const statement of statements(young)) {
          const plan: PlanNode[] = await explain(client, statement.text, statement.values, mode);
          const onTrace = plan.filter((node) => node['Relation Name'] === 'key_attempts' || node['Relation Name'] === 'key_attempt_counts');
          expect(onTrace.length, `${statement.name} (${mode})`).toBeGreaterThan(0);
          expect(onTrace.filter((node) => node['Node Type'] === 'Seq Scan'), `${statement.name} (${mode})`).toEqual([]);
          for (const index of [statement.index].flat()) expect(plan.some((node) => node['Index Name'] === index), `${statement.name} (${mode}) uses ${index}`).toBe(true);
        }
      }
    } finally {
      client.release();
    }
  };

  it("serves each of the dashboard's (named) reads by its index on new, never-analyzed tables", async () => {
    await check(true);
  });

  it(`serves each read and sweep by its index with ${KEYS.toLocaleString('en')} keys of traces, analyzed`, async () => {
    await db.pool.query(
      `INSERT INTO retrysafe.key_attempt_counts (principal_id, service, scope, key, replays, conflicts, mismatches, quota_refusals, last_at, expires_at)
       SELECT ('00000000-0000-0000-0000-' || lpad((i % ${PRINCIPALS})::text, 12, '0'))::uuid, CASE WHEN i % 4 = 0 THEN 'orders' ELSE 'demo' END, 'POST /x', 'key-' || i,
              i % 5, i % 7, i % 3, 0, now(), now() + (i % 86400) * interval '1 second'
       FROM generate_series(1, $1::int) AS i`,
      [KEYS],
    );
    await db.pool.query(
      `INSERT INTO retrysafe.key_attempts (principal_id, service, scope, key, at, correlation_id, outcome, status, expires_at)
       SELECT ('00000000-0000-0000-0000-' || lpad((i % ${PRINCIPALS})::text, 12, '0'))::uuid, CASE WHEN i % 4 = 0 THEN 'orders' ELSE 'demo' END, 'POST /x', 'key-' || i,
              now() - j * interval '1 second', gen_random_uuid(), 'mismatch', 422, now() + (i % 86400) * interval '1 second'
       FROM generate_series(1, $1::int) AS i, generate_series(1, 3) AS j`,
      [KEYS],
    );
    await db.pool.query('ANALYZE retrysafe.key_attempts; ANALYZE retrysafe.key_attempt_counts');
    await check();
  });
});
