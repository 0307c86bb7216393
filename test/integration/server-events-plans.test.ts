// The overview's reads of its events' records (the server's alert history, the store's service
// instance starts) are served by their indexes under a limit: proven by EXPLAIN, custom and
// generic plans, on tables never analyzed (a new install) and on tables of a year's churn, analyzed.
import { describe, expect, it } from 'vitest';
import { explainPrepared as explain, recordingQueryable, type PlanNode } from '../../packages/store/test/helpers/plan';
import { readAlertHistory } from '../../server/metrics/alert-history';
import { readInstanceStarts } from '../../server/instance-starts';
import { useTestDatabase } from '../helpers/database';

const hour = 3_600_000;

describe('server events plans', () => {
  const db = useTestDatabase();

  /** Each statement the overview's reads send for an hour a day ago, a month ending now, and one scope's hour. */
  async function statements() {
    const recorded = recordingQueryable(db.pool);
    for (const choice of [
      { from: new Date(Date.now() - 25 * hour), to: new Date(Date.now() - 24 * hour), service: null, scope: null },
      { from: new Date(Date.now() - 720 * hour), to: new Date(), service: null, scope: null },
      { from: new Date(Date.now() - hour), to: new Date(), service: 'orders', scope: 'POST /e1' },
    ]) {
      await readAlertHistory(recorded.db, choice);
      await readInstanceStarts(recorded.db, choice, 200);
    }
    expect(recorded.statements).toHaveLength(12);
    return recorded.statements;
  }

  // The open firings: the partial index of them, or the ends' index at its NULLs (either reads only them).
  const served = (text: string): string[] =>
    text.includes('service_starts')
      ? ['service_starts_started_idx']
      : text.includes('ended_at IS NULL')
        ? ['alert_history_open_key', 'alert_history_ended_idx']
        : text.includes('ORDER BY ended_at')
          ? ['alert_history_ended_idx']
          : ['alert_history_started_idx'];

  async function expectServed() {
    const client = await db.pool.connect();
    try {
      for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
        for (const statement of await statements()) {
          const plan: PlanNode[] = await explain(client, statement.text, statement.values, mode);
          const scans = plan.filter((node) => node['Relation Name'] !== undefined);
          expect({ mode, statement: statement.text, scans: scans.map((node) => node['Node Type']) }).toEqual({
            mode,
            statement: statement.text,
            scans: [expect.stringMatching(/^(Index Scan|Index Only Scan|Bitmap Heap Scan)$/)],
          });
          const indexes = plan.map((node) => node['Index Name']).filter((name) => name !== undefined);
          expect({ statement: statement.text, indexes }).toEqual({ statement: statement.text, indexes: [expect.toBeOneOf(served(statement.text))] });
          expect(plan[0]?.['Node Type']).toBe('Limit');
        }
      }
    } finally {
      client.release();
    }
  }

  it('reads by index scans under a limit on new, never-analyzed tables', async () => {
    const { rows } = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_user_tables WHERE (schemaname = 'retrysafe_server' OR relid = 'retrysafe.service_starts'::regclass)
         AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)`,
    );
    expect(rows[0]?.n).toBe(0);
    await expectServed();
  });

  it('reads by index scans under a limit after a year of firings and starts, analyzed', async () => {
    await db.pool.query(
      `INSERT INTO retrysafe_server.alert_history ("check", service, scope, store_wide, severity, summary, started_at, ended_at)
       SELECT 'claim_p99', CASE WHEN i % 2 = 0 THEN 'orders' ELSE 'demo' END, 'POST /e' || (i % 50), false, 'warning', 'p99',
              now() - (200000 - i) * interval '150 seconds', CASE WHEN i % 1000 = 0 THEN NULL ELSE now() - (200000 - i) * interval '150 seconds' + interval '1 minute' END
       FROM generate_series(1, 200000) AS i
       -- One open firing per check, service and scope.
       ON CONFLICT DO NOTHING;
       -- Starts of ten services, one every 5 minutes (a busy fleet's restarts), 'orders' among them.
       INSERT INTO retrysafe.service_starts (started_at, service, instance, package_version)
       SELECT now() - (100000 - i) * interval '5 minutes', (ARRAY['demo', 'orders', 's2', 's3', 's4', 's5', 's6', 's7', 's8', 's9'])[1 + i % 10], 'host:' || i, '0.1.0'
       FROM generate_series(1, 100000) AS i;
       ANALYZE retrysafe_server.alert_history; ANALYZE retrysafe.service_starts;`,
    );
    await expectServed();
  });
});
