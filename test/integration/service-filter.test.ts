// A page's ?service= filter (the retention review's): checked against the services policies
// name, and when that read fails, logged by SQLSTATE and kept, never silently dropped.
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { captureLog } from '../helpers/log-capture';
import { createTestDatabase, useTestDatabase } from '../helpers/database';
import { ensurePolicies } from '../../server/retention/policies';
import { defaultPolicyFields, DEMO_SERVICE } from '../../server/demo/policies';
import { checkServiceFilter } from '../../server/service-filter';

describe('checkServiceFilter', () => {
  const db = useTestDatabase();

  it('keeps a service that has policies and corrects one that has none', async () => {
    await ensurePolicies(db.pool, DEMO_SERVICE, defaultPolicyFields, 'system');
    expect(await checkServiceFilter(db.pool, DEMO_SERVICE, '/retention')).toEqual({ service: DEMO_SERVICE, notices: [] });
    expect(await checkServiceFilter(db.pool, 'no-such-service', '/retention')).toEqual({ service: undefined, notices: ['There is no service "no-such-service": showing all services.'] });
    expect(await checkServiceFilter(db.pool, undefined, '/retention')).toEqual({ service: undefined, notices: [] });
  });

  it('logs a failed read by its SQLSTATE and keeps the asked service for the page to check again', async () => {
    // A database without the schema: the read fails for real (42P01).
    const empty = await createTestDatabase({ empty: true });
    const pool = new pg.Pool({ connectionString: empty.url, max: 1 });
    try {
      const { log, lines } = captureLog();
      expect(await checkServiceFilter(pool, DEMO_SERVICE, '/retention', log)).toEqual({ service: DEMO_SERVICE, notices: [] });
      expect(lines).toHaveLength(1);
      expect(JSON.parse(lines[0] ?? '{}')).toMatchObject({ level: 'error', page: '/retention', error: { sqlstate: '42P01' } });
      expect(lines[0]).not.toContain('endpoint_policies');
    } finally {
      await pool.end();
      await empty.drop();
    }
  });
});
