// Store statistics: catalog- and index-served figures, the baseline from the flow history,
// and one sample a minute however many instances try.
import { describe, expect, it } from 'vitest';
import { ensurePolicies } from '../../server/retention/policies';
import { evaluateAlerts, readAlertInputs } from '../../server/metrics/alerts';
import { readBaseline, sampleStoreStats } from '../../server/metrics/sampler';
import { readStoreFigures } from '../../server/metrics/store-figures';
import { awaitStepRoom } from '../helpers/clock';
import { useTestDatabase } from '../helpers/database';

const policy = (retentionSeconds: number, scopeMode: 'endpoint' | 'intent' = 'endpoint') => ({
  scopeMode,
  retryWindowSeconds: Math.min(retentionSeconds, 3_600),
  retentionSeconds,
  leaseMs: 30_000,
  lockTimeoutMs: 5_000,
  maxResponseBytes: 4_096,
  liveKeyQuota: 1_000,
});

describe('store statistics', () => {
  const db = useTestDatabase();

  it('computes the baseline per service and scope from new keys within its trailing retention', async () => {
    await ensurePolicies(db.pool, 'demo', { 'POST /a': policy(7_200), 'POST /b': policy(86_400), 'POST /c': policy(14_400, 'intent') }, 'system');
    // Another service's policy of the same endpoint keeps its keys longer: its own window counts them.
    await ensurePolicies(db.pool, 'orders', { 'POST /a': policy(86_400) }, 'system');
    await db.pool.query(`
      INSERT INTO flow_counts_minute (minute, service, scope, outcome, count) VALUES
        (date_trunc('minute', now()) - interval '10 minutes', 'demo', 'POST /a', 'new', 100),
        (date_trunc('minute', now()) - interval '10 minutes', 'demo', 'POST /a', 'replay', 999),
        (date_trunc('minute', now()) - interval '3 hours', 'demo', 'POST /a', 'new', 50),
        (date_trunc('minute', now()) - interval '3 hours', 'orders', 'POST /a', 'new', 30),
        (date_trunc('minute', now()) - interval '3 hours', 'demo', 'POST /b', 'new', 40),
        (date_trunc('minute', now()) - interval '1 hour', 'demo', 'intent', 'new', 7),
        (date_trunc('minute', now()) - interval '1 hour', 'orders', 'intent', 'new', 500);
      INSERT INTO flow_counts_hour (hour, service, scope, outcome, count) VALUES
        (date_trunc('hour', now()) - interval '20 hours', 'demo', 'POST /b', 'new', 60),
        (date_trunc('hour', now()) - interval '30 hours', 'demo', 'POST /b', 'new', 1000);`);
    const baseline = await readBaseline(db.pool);
    // The orders service has no intent policy: its intent claims are in no baseline.
    expect(baseline).toEqual([
      { service: 'demo', scope: 'POST /a', retentionSeconds: 7_200, newKeys: 100 },
      { service: 'demo', scope: 'POST /b', retentionSeconds: 86_400, newKeys: 100 },
      { service: 'demo', scope: 'intent', retentionSeconds: 14_400, newKeys: 7 },
      { service: 'orders', scope: 'POST /a', retentionSeconds: 86_400, newKeys: 30 },
    ]);
  });

  it('reads the figures from the catalog and the indexes', async () => {
    await db.pool.query(`
      INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, created_at, expires_at)
      SELECT gen_random_uuid(), 'demo', 'POST /a', 'k' || i, 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(),
             now() - interval '1 minute', now() - interval '3 hours', now() - interval '1 hour' + i * interval '1 second'
      FROM generate_series(1, 10) AS i`);
    const figures = await readStoreFigures(db.pool);
    expect(figures.estimatedRows).toBe(10);
    expect(figures.staleClaims).toBe(10);
    expect(figures.cleanupLagSeconds).toBeGreaterThan(3_590);
    expect(figures.cleanupLagSeconds).toBeLessThan(3_700);
    expect(figures.oldestRowAgeSeconds).toBeGreaterThan(3 * 3_600 - 10);
    expect(figures.tableBytes).toBeGreaterThan(0);
    expect(figures.indexBytes).toBeGreaterThan(0);
  });

  it('takes one sample a minute however many instances try', async () => {
    // Keep the whole test inside one minute.
    await awaitStepRoom(10);
    const results = await Promise.all([sampleStoreStats(db.pool), sampleStoreStats(db.pool), sampleStoreStats(db.pool)]);
    expect(results.filter((result) => result !== null)).toHaveLength(1);
    const { rows } = await db.pool.query<{ estimated_rows: string; baseline_rows: string }>('SELECT estimated_rows, baseline_rows FROM store_stats');
    // Every service's baseline: 100 + 100 + 7 (demo) + 30 (orders).
    expect(rows).toEqual([{ estimated_rows: '10', baseline_rows: '237' }]);
    expect(await sampleStoreStats(db.pool)).toBeNull(); // this minute is taken
  });

  it('evaluates alerts from the stored series', async () => {
    await db.pool.query(`
      DELETE FROM store_stats;
      INSERT INTO store_stats (sampled_at, estimated_rows, baseline_rows, table_bytes, index_bytes, toast_bytes, cleanup_lag_seconds, stale_claims)
      SELECT date_trunc('minute', now()) - m * interval '1 minute', 5000, 1000, 0, 0, 0, 7200, 1 FROM generate_series(0, 20) AS m;
      INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
      VALUES (gen_random_uuid(), 'demo', 'POST /a', 'crashed', 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(),
              now() - interval '20 minutes', now() + interval '1 day');`);
    const alerts = evaluateAlerts(await readAlertInputs(db.pool));
    expect(alerts.map((alert) => alert.name)).toEqual(expect.arrayContaining(['rows_over_baseline', 'cleanup_lag', 'stale_claims']));
  });
});
