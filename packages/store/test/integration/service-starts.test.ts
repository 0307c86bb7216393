// createRetrysafe records each start of a service's instance (service, host:pid, the package's
// version) in retrysafe.service_starts, one row a start, off the start's path: a start that
// cannot be recorded is told to onError and the service starts all the same.
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { describe, expect, it } from 'vitest';
import { createRetrysafe, PACKAGE_VERSION } from '@retrysafe/store';
import { useTestDatabase } from '../helpers/database';

const responseKeys = `k1:${randomBytes(32).toString('base64')}`;

describe('service starts', () => {
  const db = useTestDatabase();
  const starts = async (service: string) =>
    (await db.pool.query<{ service: string; instance: string; package_version: string; recent: boolean }>(
      "SELECT service, instance, package_version, started_at > now() - interval '1 minute' AS recent FROM retrysafe.service_starts WHERE service = $1 ORDER BY id",
      [service],
    )).rows;

  it('records one row a start, with the instance and the package version', async () => {
    const retrysafe = await createRetrysafe({ connectionString: db.url, service: 'orders', fingerprintSecret: randomBytes(32), responseKeys, quota: false });
    await retrysafe.stop();
    expect(PACKAGE_VERSION).toMatch(/^\d+\.\d+\.\d+/);
    expect(await starts('orders')).toEqual([{ service: 'orders', instance: `${hostname()}:${process.pid}`, package_version: PACKAGE_VERSION, recent: true }]);
    const again = await createRetrysafe({ connectionString: db.url, service: 'orders', fingerprintSecret: randomBytes(32), responseKeys, quota: false });
    await again.stop();
    expect(await starts('orders')).toHaveLength(2);
  });

  it('starts when the start cannot be recorded, and tells onError', async () => {
    const errors: { task: string; code: unknown }[] = [];
    await db.pool.query('ALTER TABLE retrysafe.service_starts RENAME TO service_starts_away');
    try {
      const retrysafe = await createRetrysafe({
        connectionString: db.url,
        service: 'refunds',
        fingerprintSecret: randomBytes(32),
        responseKeys,
        quota: false,
        onError: (error, { task }) => errors.push({ task, code: (error as { code?: unknown }).code }),
      });
      expect(retrysafe.store).toBeDefined();
      await retrysafe.stop();
    } finally {
      await db.pool.query('ALTER TABLE retrysafe.service_starts_away RENAME TO service_starts');
    }
    expect(errors).toEqual([{ task: 'service start record', code: '42P01' }]);
    expect(await starts('refunds')).toEqual([]);
  });
});
