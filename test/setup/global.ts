// Once per test run: a Postgres server (embedded in a temp folder, or TEST_DATABASE_URL)
// and a migrated template database that each test file clones into its own database.
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import type { EmbeddedCluster } from '../../db/embedded';
import { withDatabase } from '../../packages/store/test/helpers/database-url';

// adminUrl, templateDatabase, partitionedTemplateDatabase and runPrefix are declared by the
// package's setup (packages/store/test/setup/global.ts), whose helpers this run's files use too.
declare module 'vitest' {
  export interface ProvidedContext {
    /** Password of the dashboard's login role (db/dashboard-access.ts) for this run. */
    dashboardPassword: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // The server's modules load @retrysafe/store by name, and in a global setup that is its dist/
  // (vitest's export conditions do not reach it): built first when its sources changed, as
  // `npm start` does, then the modules are loaded.
  const built = spawnSync(process.execPath, ['scripts/launch.mjs', 'build'], { stdio: ['ignore', 'inherit', 'inherit'] });
  if (built.status !== 0) throw new Error(`node scripts/launch.mjs build failed (${built.signal ?? `exit code ${built.status}`})`);
  const { acquireEmbeddedPostgres } = await import('../../db/embedded');
  const { migrateDatabase } = await import('../../db/migrate');
  const { ensureDashboardLogin } = await import('../../db/dashboard-access');
  let cluster: EmbeddedCluster | undefined;
  let tempDir: string | undefined;
  let adminUrl = process.env.TEST_DATABASE_URL;
  if (adminUrl) {
    process.stdout.write(`Tests use TEST_DATABASE_URL (${new URL(adminUrl).host})\n`);
  } else {
    tempDir = await mkdtemp(join(tmpdir(), 'retrysafe-test-'));
    await chmod(tempDir, 0o755); // the postgres OS user must reach it when we run as root
    cluster = await acquireEmbeddedPostgres({ dir: tempDir, settings: { max_connections: 400, fsync: 'off' } });
    adminUrl = cluster.url.replace(/\/[^/]*$/, '/postgres');
    process.stdout.write(`Tests use embedded Postgres on 127.0.0.1:${cluster.port}\n`);
  }

  const runPrefix = `rs_test_${process.pid}_${Date.now().toString(36)}`;
  const templateDatabase = `${runPrefix}_template`;
  const partitionedTemplateDatabase = `${runPrefix}_template_partitioned`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  const { rows } = await admin.query<{ server_version: string }>('SHOW server_version');
  process.stdout.write(`PostgreSQL ${rows[0]?.server_version ?? '?'}\n`);
  await admin.query(`CREATE DATABASE ${templateDatabase}`);
  await admin.query(`CREATE DATABASE ${partitionedTemplateDatabase}`);
  await admin.end();
  await migrateDatabase(withDatabase(adminUrl, templateDatabase));
  await migrateDatabase(withDatabase(adminUrl, partitionedTemplateDatabase), { layout: 'partitioned' });

  project.provide('adminUrl', adminUrl);
  project.provide('templateDatabase', templateDatabase);
  project.provide('partitionedTemplateDatabase', partitionedTemplateDatabase);
  project.provide('runPrefix', runPrefix);
  const dashboardPassword = randomBytes(18).toString('base64url');
  const login = new pg.Client({ connectionString: adminUrl });
  await login.connect();
  await ensureDashboardLogin(login, adminUrl, dashboardPassword).finally(() => login.end());
  project.provide('dashboardPassword', dashboardPassword);

  return async () => {
    const client = new pg.Client({ connectionString: adminUrl });
    await client.connect();
    const leftovers = await client.query<{ datname: string }>('SELECT datname FROM pg_database WHERE datname LIKE $1', [
      `${runPrefix}%`,
    ]);
    for (const { datname } of leftovers.rows) {
      await client.query(`DROP DATABASE IF EXISTS ${client.escapeIdentifier(datname)} WITH (FORCE)`);
    }
    await client.end();
    await cluster?.release();
    if (tempDir) await rm(tempDir, { recursive: true, force: true });
  };
}
