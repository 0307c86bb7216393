// The demo traffic generator, running inside the started server: after a few seconds the
// stored flow metrics show new keys, replays and the other outcomes it provokes.
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TrafficGenerator } from '../../server/demo/traffic';
import { useTestDatabase } from '../helpers/database';
import { startServer, type RunningServer } from '../helpers/server';
import { createTestStore, sleep, testPolicy } from '../../packages/store/test/helpers/store';

const TOKEN = 'test-metrics-token-0123456789';

describe('demo traffic', () => {
  const db = useTestDatabase();
  let server: RunningServer | undefined;

  beforeAll(async () => {
    server = await startServer(db.url, { DEMO_TRAFFIC: '1', METRICS_FLUSH_SECONDS: '1', METRICS_TOKEN: TOKEN });
  });
  afterAll(async () => {
    await server?.stop();
  });

  // Mismatches, conflicts and crashed handlers are rarer draws (seconds to minutes apart);
  // new keys and replays come within seconds, which is what this test can wait for.
  it('drives the API like real clients: new keys and replays are recorded', { timeout: 60_000 }, async () => {
    const wanted = ['new', 'replay'];
    let seen: string[] = [];
    for (let attempt = 0; attempt < 45 && !wanted.every((outcome) => seen.includes(outcome)); attempt += 1) {
      await sleep(1_000);
      const { rows } = await db.pool.query<{ outcome: string }>('SELECT DISTINCT outcome FROM flow_counts_minute');
      seen = rows.map((row) => row.outcome);
    }
    expect(seen).toEqual(expect.arrayContaining(wanted));
    const { rows } = await db.pool.query<{ n: string }>("SELECT count(*) AS n FROM tenants WHERE name LIKE 'Demo traffic %' AND revoked_at IS NULL");
    expect(Number(rows[0]?.n)).toBe(3);
  });

  it('exposes Prometheus metrics that parse, behind the metrics token', async () => {
    if (!server) throw new Error('no server');
    const refused = await fetch(`${server.baseUrl}/api/metrics`);
    expect(refused.status).toBe(401);
    expect(refused.headers.get('content-type')).toBe('application/problem+json');
    expect((await fetch(`${server.baseUrl}/api/metrics`, { headers: { Authorization: 'Bearer wrong-token-0123456789' } })).status).toBe(401);
    const response = await fetch(`${server.baseUrl}/api/metrics`, { headers: { Authorization: `Bearer ${TOKEN}` } });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toContain('text/plain');
    const families = parsePrometheusTextFormat(await response.text());
    const byName = new Map(families.map((family) => [family.name, family]));
    const claims = byName.get('retrysafe_claims_total');
    expect(claims?.type).toBe('COUNTER');
    expect(claims?.metrics.some((sample) => sample.labels?.outcome === 'new' && sample.labels.scope === 'POST /api/v1/payments')).toBe(true);
    expect(byName.get('retrysafe_claim_duration_seconds')?.type).toBe('HISTOGRAM');
    for (const gauge of ['retrysafe_store_rows_estimate', 'retrysafe_stale_claims', 'retrysafe_store_cleanup_lag_seconds', 'retrysafe_store_response_bytes', 'retrysafe_store_scope_rows_estimate']) {
      expect(byName.get(gauge)?.type).toBe('GAUGE');
    }
  });

  it('refuses to send anywhere but loopback', () => {
    const { store } = createTestStore(db.pool);
    expect(() => new TrafficGenerator({ baseUrl: 'http://10.0.0.5:3000', pool: db.pool, store, policyFor: () => testPolicy })).toThrow(/loopback/);
  });
});
