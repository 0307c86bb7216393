// Issue #26: DASHBOARD_DATABASE_URL with a login role that is not a member of retrysafe_dashboard
// (a team's own role, the GRANT forgotten). The server started and every sign-in answered 500
// (42P01: the role cannot see the retrysafe schema, so "operators" does not exist for it). Now the
// start refuses in one line naming DASHBOARD_DATABASE_URL and the GRANT that fixes it, and once
// that GRANT is run the same settings start and sign in.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { DASHBOARD_ROLE } from '../../db/dashboard-access';
import { checkDashboardRole } from '../../server/dashboard-pools';
import { createTestDatabase } from '../helpers/database';
import { submitLoginForm } from '../helpers/login-form';
import { startServer, testAdmin } from '../helpers/server';

describe("the dashboard's login role", () => {
  const login = `${inject('runPrefix')}_dash_${randomBytes(3).toString('hex')}`;
  const password = randomBytes(12).toString('base64url');
  let database: Awaited<ReturnType<typeof createTestDatabase>> | undefined;
  let dashboardUrl = '';

  const asAdmin = async (sql: string) => {
    const admin = new pg.Client({ connectionString: inject('adminUrl') });
    await admin.connect();
    try {
      await admin.query(sql);
    } finally {
      await admin.end();
    }
  };

  beforeAll(async () => {
    database = await createTestDatabase();
    await asAdmin(`CREATE ROLE ${login} LOGIN PASSWORD '${password}'`);
    const url = new URL(database.url);
    url.username = login;
    url.password = password;
    dashboardUrl = url.toString();
  });
  afterAll(async () => {
    await database?.drop();
    await asAdmin(`DROP ROLE IF EXISTS ${login}`);
  });

  it('not a member of retrysafe_dashboard: the start refuses, naming DASHBOARD_DATABASE_URL and the GRANT to run', async () => {
    if (!database) throw new Error('set-up failed');
    // A server that started anyway (as before) is stopped again, so a failing run leaves none behind.
    const { started, output } = await startServer(database.url, { DASHBOARD_DATABASE_URL: dashboardUrl, DEMO_TRAFFIC: '0' }).then(
      async (server) => {
        await server.stop();
        return { started: true, output: server.output() };
      },
      (error: unknown) => ({ started: false, output: (error as Error).message }),
    );
    expect(started, output.slice(-2_000)).toBe(false);
    expect(output).toContain('server exited during start-up');
    expect(output).toContain(`Start failed: DASHBOARD_DATABASE_URL: its role "${login}" is not a member of ${DASHBOARD_ROLE}`);
    expect(output).toContain(`GRANT ${DASHBOARD_ROLE} TO "${login}"`);
    // Neither the password nor the URL is printed.
    expect(output).not.toContain(password);
  }, 240_000);

  it("a member whose group may not use the server's schema (the grants not applied): the check names the grants, not the search_path", async () => {
    if (!database) throw new Error('set-up failed');
    await asAdmin(`GRANT ${DASHBOARD_ROLE} TO "${login}"`);
    // Schema privileges are the database's own: this database only.
    const owner = new pg.Client({ connectionString: database.url });
    await owner.connect();
    try {
      await owner.query(`REVOKE USAGE ON SCHEMA retrysafe_server FROM ${DASHBOARD_ROLE}`);
      // Before, with a right search_path, it said the search_path "does not reach" the schemas.
      await expect(checkDashboardRole(dashboardUrl)).rejects.toThrow(
        `DASHBOARD_DATABASE_URL: its role "${login}" may not use the schema retrysafe_server (no USAGE: the dashboard's grants were not applied to this database), so every sign-in would fail: have a DBA run the SQL printed by \`npm run cli -- db grants\``,
      );
    } finally {
      await owner.query(`GRANT USAGE ON SCHEMA retrysafe_server TO ${DASHBOARD_ROLE}`);
      await owner.end();
    }
    await expect(checkDashboardRole(dashboardUrl)).resolves.toBeUndefined();
  });

  it('after that GRANT the same settings start, answer the health check and sign the admin in', async () => {
    if (!database) throw new Error('set-up failed');
    await asAdmin(`GRANT ${DASHBOARD_ROLE} TO "${login}"`);
    const server = await startServer(database.url, { DASHBOARD_DATABASE_URL: dashboardUrl, DEMO_TRAFFIC: '0' });
    try {
      expect((await fetch(`${server.baseUrl}/api/health`)).status).toBe(200);
      const signedIn = await submitLoginForm(server.baseUrl, testAdmin, {}, { waitWhenBusy: true });
      expect(signedIn.message).toBeNull();
      expect(signedIn.status).toBe(303);
    } finally {
      await server.stop();
    }
  }, 240_000);
});
