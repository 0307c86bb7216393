// Issue #26, point 1: a team's own Postgres (DATABASE_URL, not embedded mode) with every other
// setting at its default, PUBLIC_URL included. `npm start` must reach healthy (its self-check
// was answered 421 for Host 127.0.0.1:PORT and the start failed after 60 s), print where to open
// the dashboard, and an operator must be able to sign in there. The database is this file's own
// and empty: the start migrates it as it would a team's new database.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, dashboardUrlFor } from '../helpers/database';
import { submitLoginForm } from '../helpers/login-form';
import { testAdmin, testSecrets } from '../helpers/server';
import { spawnStart, type RunningServer } from '../../scripts/spawn-start';

describe('npm start on a database of the team\'s own, PUBLIC_URL unset', () => {
  let database: Awaited<ReturnType<typeof createTestDatabase>> | undefined;
  let server: RunningServer | undefined;

  beforeAll(async () => {
    database = await createTestDatabase({ empty: true, serverSearchPath: false });
    server = await spawnStart({
      DATABASE_URL: database.url,
      DASHBOARD_DATABASE_URL: dashboardUrlFor(database.url),
      IDEMPOTENCY_SECRET: testSecrets.IDEMPOTENCY_SECRET,
      RESPONSE_ENCRYPTION_KEYS: testSecrets.RESPONSE_ENCRYPTION_KEYS,
      AUTH_SECRET: testSecrets.AUTH_SECRET,
      ADMIN_EMAIL: testAdmin.email,
      ADMIN_PASSWORD: testAdmin.password,
      // Empty counts as unset: the defaults a team starts with.
      PUBLIC_URL: '',
      DEMO_TRAFFIC: '',
      RETRYSAFE_EMBEDDED: '',
      LOG_LEVEL: 'error',
    });
  });
  afterAll(async () => {
    await server?.stop();
    await database?.drop();
  });

  it('reaches healthy and says to open the default PUBLIC_URL, http://localhost:PORT', () => {
    const output = server?.output() ?? '';
    expect(output).toContain(`[retrysafe] Ready: open http://localhost:${server?.port} in your browser`);
    expect(output).not.toContain('Start failed');
  });

  it('runs built JavaScript, as production does: the bundled front, not TypeScript through tsx (#29 point 4)', () => {
    const output = server?.output() ?? '';
    expect(output).toMatch(/\[retrysafe\] Starting the server on 127\.0\.0\.1:\d+ \(node --enable-source-maps \.build\/[0-9a-f]{16}\/serve\.mjs\)/);
    expect(output).not.toContain('--import tsx');
  });

  it('answers its health check and signs the admin in at that address', async () => {
    const base = `http://localhost:${server?.port}`;
    const health = await fetch(`${base}/api/health`);
    expect(health.status).toBe(200);
    const signedIn = await submitLoginForm(base, testAdmin, {}, { waitWhenBusy: true });
    expect(signedIn.message).toBeNull();
    expect(signedIn.status).toBe(303);
    const cookie = signedIn.setCookie.map((line) => line.split(';')[0]).join('; ');
    expect(cookie).not.toBe('');
    const overview = await fetch(`${base}/api/admin/overview?range=1h`, { headers: { cookie } });
    expect(overview.status).toBe(200);
  });

  it('still refuses a host name it does not answer for (the DNS-rebinding guard stays)', async () => {
    const misdirected = await fetch(`http://127.0.0.1:${server?.port}/api/health`);
    expect(misdirected.status).toBe(421);
  });
});
