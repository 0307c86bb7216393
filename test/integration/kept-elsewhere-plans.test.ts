// The overview's read of a kept-elsewhere service's samples (retrysafe_server.kept_elsewhere_samples,
// server migration 0004) is one backward probe of the primary key per step, whatever the table
// holds: proven by EXPLAIN, custom and generic plans, on a new, never-analyzed table and on one of
// 10 M samples (20 services, a row a minute each, about a year), analyzed.
import { describe, expect, it } from 'vitest';
import { explainPrepared as explain, recordingQueryable, type PlanNode } from '../../packages/store/test/helpers/plan';
import { readKeptElsewhereSeries } from '../../server/metrics/kept-elsewhere-samples';
import { useTestDatabase } from '../helpers/database';

const hour = 3_600_000;

describe('kept-elsewhere samples plans', () => {
  const db = useTestDatabase();

  /** The statements the overview sends for an hour a day ago (1-minute steps) and 30 days ending now (6-hour steps). */
  async function statements() {
    const recorded = recordingQueryable(db.pool);
    await readKeptElsewhereSeries(recorded.db, { service: 'orders', from: new Date(Date.now() - 25 * hour), to: new Date(Date.now() - 24 * hour), stepSeconds: 60 });
    await readKeptElsewhereSeries(recorded.db, { service: 'orders', from: new Date(Date.now() - 720 * hour), to: new Date(), stepSeconds: 21_600 });
    expect(recorded.statements).toHaveLength(2);
    return recorded.statements;
  }

  async function expectServed(analysed: boolean) {
    const client = await db.pool.connect();
    try {
      for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
        for (const statement of await statements()) {
          const plan: PlanNode[] = await explain(client, statement.text, statement.values, mode);
          const scans = plan.filter((node) => node['Relation Name'] !== undefined);
          expect({ mode, scans: scans.map((node) => [node['Node Type'], node['Index Name']]) }).toEqual({ mode, scans: [['Index Scan', 'kept_elsewhere_samples_pkey']] });
          // Each step's probe stops at its first row.
          expect(plan.some((node) => node['Node Type'] === 'Limit')).toBe(true);
        }
      }
      // The retention's delete: the partial sampled_at index, whatever the service. It runs every
      // minute, so it finds about a minute's samples past the cutoff: 347 days here, the oldest
      // few hours of the year of samples below (35 days on a new table).
      const retention: PlanNode[] = await explain(client, "DELETE FROM retrysafe_server.kept_elsewhere_samples WHERE sampled_at < now() - $1::int * interval '1 day' AND sampled_at > '-infinity'::timestamptz", [
        analysed ? 347 : 35,
      ]);
      expect(retention.filter((node) => node['Index Name'] !== undefined).map((node) => node['Index Name'])).toEqual(['kept_elsewhere_samples_sampled_idx']);
    } finally {
      client.release();
    }
  }

  it('reads a backward primary-key probe per step on a new, never-analyzed table', async () => {
    const { rows } = await db.pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_user_tables WHERE relid = 'retrysafe_server.kept_elsewhere_samples'::regclass AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)",
    );
    expect(rows[0]?.n).toBe(0);
    await expectServed(false);
  });

  it('reads a backward primary-key probe per step at 10 M samples, analyzed', async () => {
    await db.pool.query(
      `INSERT INTO retrysafe_server.kept_elsewhere_samples (service, sampled_at, backend, keys, bytes, stale_claims, oldest_stale_seconds)
       SELECT CASE WHEN i % 20 = 0 THEN 'orders' ELSE 's' || (i % 20) END, date_trunc('minute', now()) - (i / 20) * interval '1 minute',
              CASE WHEN i % 2 = 0 THEN 'redis' ELSE 'mysql' END, 1000000 + i % 977, 500000000 + i, i % 3, (i % 3) * 60.0
       FROM generate_series(0, 9999999) AS i;
       ANALYZE retrysafe_server.kept_elsewhere_samples;`,
    );
    await expectServed(true);
  }, 600_000);
});
