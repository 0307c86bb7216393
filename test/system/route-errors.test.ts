// A route handler's unexpected error, made real: the dashboard role loses its grant on the
// flow buckets while the server runs, so the overview's query fails in Postgres. The answer is a
// problem+json 500 with no-store and a correlation id, and the server logs it as one JSON line
// (route, method, that correlation id, the SQLSTATE) instead of Next's multi-line print, without
// the failed statement's message.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DASHBOARD_ROLE } from '../../db/dashboard-access';
import { useTestDatabase } from '../helpers/database';
import { signInEveryRole } from '../helpers/operators';
import { startServer, type RunningServer } from '../helpers/server';

describe('an unexpected error in a route handler', () => {
  const db = useTestDatabase();
  let server: RunningServer | undefined;
  let cookie = '';

  beforeAll(async () => {
    server = await startServer(db.url, { DEMO_TRAFFIC: '0' });
    cookie = (await signInEveryRole(db, server.baseUrl, 'route-errors.example')).get('viewer') ?? '';
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('answers a problem+json 500 and logs one JSON line with its correlation id', async () => {
    const base = server?.baseUrl ?? '';
    expect((await fetch(`${base}/api/admin/overview?range=1h`, { headers: { cookie } })).status).toBe(200);
    await db.pool.query(`REVOKE SELECT ON flow_counts_minute FROM ${DASHBOARD_ROLE}`);
    try {
      const before = (server?.output() ?? '').length;
      const response = await fetch(`${base}/api/admin/overview?range=1h`, { headers: { cookie } });
      expect(response.status).toBe(500);
      expect(response.headers.get('content-type')).toBe('application/problem+json');
      expect(response.headers.get('cache-control')).toBe('no-store');
      const problem = (await response.json()) as { type: string; correlationId: string };
      expect(problem.type).toBe('urn:retrysafe:problem:internal');
      await expect.poll(() => (server?.output() ?? '').slice(before)).toContain(problem.correlationId);
      const printed = (server?.output() ?? '').slice(before);
      const line = printed.split('\n').find((candidate) => candidate.includes(problem.correlationId)) ?? '';
      expect(JSON.parse(line)).toMatchObject({
        level: 'error',
        msg: 'route failed',
        route: '/api/admin/overview',
        method: 'GET',
        correlationId: problem.correlationId,
        error: { sqlstate: '42501' },
      });
      expect(printed).not.toMatch(/permission denied|⨯|\n\s+at /);
    } finally {
      await db.pool.query(`GRANT SELECT ON flow_counts_minute TO ${DASHBOARD_ROLE}`);
    }
  });
});
