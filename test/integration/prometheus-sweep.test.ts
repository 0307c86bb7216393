// The sweep gauges read the last finished run, so they stay on /api/metrics while the next run
// is under way (an alert on their staleness must not flap every sweep), and the overview means
// the same run by "the last sweep".
import { describe, expect, it } from 'vitest';
import { overviewQuery, readOverview } from '../../server/metrics/overview';
import { createPrometheusMetrics } from '../../server/metrics/prometheus';
import { useTestDatabase } from '../helpers/database';

describe('the last sweep', () => {
  const db = useTestDatabase();

  it('is the last finished run: metrics keep it while a run is under way, and the overview shows it', async () => {
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO sweep_runs (trigger, status, started_at, finished_at, rows_deleted) VALUES ('interval', 'completed', now() - interval '2 minutes', now() - interval '1 minute', 42) RETURNING id`,
    );
    // The next run has started and not finished.
    await db.pool.query(`INSERT INTO sweep_runs (trigger, status) VALUES ('interval', 'running')`);
    const { registry } = createPrometheusMetrics(db.pool);
    const text = await registry.metrics();
    expect(text).toMatch(/^retrysafe_sweep_last_run_timestamp_seconds\{status="completed"\} \d+(\.\d+)?$/m);
    expect(text).toMatch(/^retrysafe_sweep_last_rows_deleted 42$/m);
    const overview = await readOverview(db.pool, overviewQuery.parse({ range: '1h' }));
    expect(overview.lastSweep).toMatchObject({ id: Number(rows[0]?.id), status: 'completed', rowsDeleted: 42 });
  });
});
