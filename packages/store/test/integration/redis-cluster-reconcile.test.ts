// The reconciler on a Redis Cluster (issue 27.5): its SCAN goes to every master (each its own
// cursor), the indexes and records it samples are read through the cluster's routing, so keys on
// every master are found.
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRetrysafe } from '@retrysafe/store';
import { recordKey } from '@retrysafe/store/redis';
import { useTestDatabase } from '../helpers/database';
import { hasRedis } from '../helpers/redis';
import { startRedisCluster, type TestRedisCluster } from '../helpers/redis-cluster';
import { jsonResult, testPolicy } from '../helpers/store';

const SERVICE = 'orders-cluster-reconcile';
const ENDPOINT = 'POST /orders';

describe.runIf(hasRedis)('the reconciler on a Redis Cluster', () => {
  const db = useTestDatabase();
  let cluster: TestRedisCluster | undefined;
  beforeAll(async () => {
    cluster = await startRedisCluster();
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it("finds completed keys whose effect is missing on every master", async () => {
    if (!cluster) throw new Error('no cluster');
    const retrysafe = await createRetrysafe({
      connectionString: db.url,
      service: SERVICE,
      fingerprintSecret: randomBytes(32),
      responseKeys: `k1:${randomBytes(32).toString('base64')}`,
      metricsFlushIntervalMs: 3_600_000,
      // No effect is ever written: every completed key is a finding.
      redis: { cluster: { nodes: cluster.rootNodes.slice(0, 1) }, reconcile: { effectExists: () => false, settleMs: 0, intervalMs: 3_600_000 } },
    });
    try {
      const principals = Array.from({ length: 12 }, () => randomUUID());
      for (const principalId of principals) {
        const answer = await retrysafe.store.execute({ principalId, key: 'a', endpoint: ENDPOINT, method: 'POST', body: { sku: 'a' }, policy: testPolicy, mode: 'claim-first', work: () => Promise.resolve(jsonResult(201, { ok: true })) });
        expect(answer.status).toBe(201);
      }
      const live = cluster;
      const masters = new Set(await Promise.all(principals.map((principalId) => live.masterOf(recordKey({ principalId, service: SERVICE, scope: ENDPOINT, key: 'a' })))));
      expect(masters.size).toBeGreaterThan(1);
      const run = await retrysafe.redis?.reconcileNow();
      expect(run).toMatchObject({ status: 'completed', examined: 12, effectChecks: 12, effectMissing: 12, passCompleted: true });
      const { rows } = await db.pool.query<{ principal_id: string }>('SELECT principal_id FROM reconcile_findings WHERE service = $1', [SERVICE]);
      expect(rows.map((row) => row.principal_id).sort()).toEqual([...principals].sort());
    } finally {
      await retrysafe.stop();
    }
  });
});
