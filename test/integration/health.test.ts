import { describe, expect, it } from 'vitest';
import { createPool } from '../../db/client';
import { freePort } from '../../db/embedded';
import { checkHealth } from '../../server/health';
import { createTestDatabase, useTestDatabase } from '../helpers/database';
import pg from 'pg';

describe('checkHealth', () => {
  const db = useTestDatabase();

  it('reports ok with the server version and the current migration', async () => {
    const report = await checkHealth(db.pool);
    expect(report.status).toBe('ok');
    expect(report.database.reachable).toBe(true);
    expect(report.database.serverVersion).toMatch(/^\d+/);
    expect(report.migrations?.current).toBe(report.migrations?.latest);
    expect(report.migrations?.pending).toEqual([]);
  });

  it('reports unavailable, without configuration in the reason, when nothing listens', async () => {
    const url = `postgres://postgres:secret-password@127.0.0.1:${await freePort()}/none`;
    const pool = createPool(url, { applicationName: 'test', connectionTimeoutMillis: 1_000 });
    const report = await checkHealth(pool);
    await pool.end();
    expect(report.status).toBe('unavailable');
    expect(report.database.reachable).toBe(false);
    expect(JSON.stringify(report)).not.toContain('secret-password');
  });

  it('reports degraded with the pending migrations on an unmigrated database', async () => {
    const created = await createTestDatabase();
    const client = new pg.Client({ connectionString: created.url });
    await client.connect();
    // Forget every applied migration: the store's journal and the demo's.
    await client.query('DROP TABLE retrysafe.migrations, retrysafe_demo.migrations');
    await client.end();
    const pool = createPool(created.url, { applicationName: 'test' });
    const report = await checkHealth(pool);
    await pool.end();
    await created.drop();
    expect(report.status).toBe('degraded');
    expect(report.migrations?.current).toBeNull();
    expect(report.migrations?.pending).toEqual(expect.arrayContaining(['0000_idempotency_keys', '0017_own_schema', '0000_demo_tables']));
  });
});
