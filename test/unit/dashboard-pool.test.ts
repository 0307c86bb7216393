// The dashboard's pool keeps its connections between auto-refreshes: an overview refreshed at
// its slowest setting finds them open (statements prepared, catalog caches warm) rather than
// opening up to ten new backends for each refresh.
import { describe, expect, it } from 'vitest';
import { createPool, DASHBOARD_POOL_IDLE_MS } from '../../db/client';
import { refreshSettings } from '../../components/overview/search-params';

describe('the dashboard pool', () => {
  it('keeps idle connections past the slowest auto-refresh', async () => {
    const slowestSeconds = Math.max(...refreshSettings.filter((setting) => setting !== 'off').map(Number));
    expect(DASHBOARD_POOL_IDLE_MS).toBeGreaterThan(slowestSeconds * 1000);
    const pool = createPool('postgres://nobody@127.0.0.1:1/none', { applicationName: 'retrysafe-test', idleTimeoutMillis: DASHBOARD_POOL_IDLE_MS });
    expect(pool.options.idleTimeoutMillis).toBe(DASHBOARD_POOL_IDLE_MS);
    await pool.end();
  });
});
