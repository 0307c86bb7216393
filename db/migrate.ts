// The Retrysafe server's migrations: the store's set (schema retrysafe, shipped in
// @retrysafe/store and applied by its own migrator, the one `npx retrysafe migrate` runs), then
// the demo API's set (schema retrysafe_demo, db/demo-migrations, the server's alone), then the
// server's own set (schema retrysafe_server, db/server-migrations: operators, sessions, the
// audit log, alert history), then the dashboard role's grants. Processes migrating at once serialise on each set's advisory lock.
import { resolve } from 'node:path';
import pg from 'pg';
import { detectLayout } from '@retrysafe/store';
import {
  applyMigrations,
  behindTransactionPooler,
  SessionRequiredError,
  TRANSACTION_POOLER_REFUSAL,
  migrationStatus as setStatus,
  readMigrations,
  STORE_MIGRATIONS,
  type MigrationSet,
  type MigrationStatus,
  type StoreLayout,
} from '@retrysafe/store/migrate';
import { applyDashboardGrants, type GrantsResult } from './dashboard-access';

export type { MigrationStatus, StoreLayout };

/** The store's migrations folder (inside the package). */
export const MIGRATIONS_FOLDER = STORE_MIGRATIONS.folder;

/** The demo API's tables (tenants, payments, refunds): a set of the Retrysafe server's own. */
export const DEMO_MIGRATIONS: MigrationSet = {
  folder: resolve(process.cwd(), 'db', 'demo-migrations'),
  schema: 'retrysafe_demo',
  // The bytes of "rsdemo" as an integer.
  lockKey: 0x727364656d6fn,
};

/** The Retrysafe server's own tables (operators, sessions, the sign-in throttle, the audit log, alert history): a set of the server alone. */
export const SERVER_MIGRATIONS: MigrationSet = {
  folder: resolve(process.cwd(), 'db', 'server-migrations'),
  schema: 'retrysafe_server',
  // The bytes of "rssrvr" as an integer.
  lockKey: 0x72737372767an,
};

export interface MigrationEntry {
  tag: string;
  when: number;
}

/** The store's migrations this build ships, oldest first. */
export async function readJournal(folder = MIGRATIONS_FOLDER): Promise<MigrationEntry[]> {
  return (await readMigrations(folder)).map(({ tag, when }) => ({ tag, when }));
}

/** Which shipped migrations (the store's, then the demo's, then the server's) the database has applied. */
export async function migrationStatus(client: pg.ClientBase | pg.Pool, folder = MIGRATIONS_FOLDER): Promise<MigrationStatus> {
  const store = await setStatus(client, { ...STORE_MIGRATIONS, folder });
  const demo = await setStatus(client, DEMO_MIGRATIONS);
  const server = await setStatus(client, SERVER_MIGRATIONS);
  return { current: store.current, latest: store.latest, pending: [...store.pending, ...demo.pending, ...server.pending] };
}

export interface MigrateResult {
  /** Tags applied, the store's, then the demo's, then the server's. */
  applied: string[];
  /** The store's newest applied migration. */
  current: string | null;
  /** The dashboard role's grants (db/dashboard-access.ts), re-applied after every migration. */
  dashboardGrants: GrantsResult;
}

export interface MigrateOptions {
  /** Another folder of the store's migrations (tests: one that stops early). */
  folder?: string;
  /** The key store's layout, chosen at install time (read by the partitioned-layout migration). */
  layout?: StoreLayout;
}

/**
 * Migrates over `connectionString`, which must hold a session (the advisory lock): a
 * transaction-mode pooler is refused (SessionRequiredError) before anything runs.
 */
export async function migrateDatabase(connectionString: string, options: MigrateOptions = {}): Promise<MigrateResult> {
  if (await behindTransactionPooler(connectionString)) throw new SessionRequiredError(`the migration connection ${TRANSACTION_POOLER_REFUSAL}`);
  const client = new pg.Client({ connectionString, application_name: 'retrysafe-migrate' });
  await client.connect();
  const lockKey = STORE_MIGRATIONS.lockKey.toString();
  try {
    // The store's lock (which applyMigrations takes again: session locks stack) held over both
    // sets and the grants, so processes migrating at once do not grant at once either.
    await client.query('SELECT pg_advisory_lock($1)', [lockKey]);
    try {
      const store = await applyMigrations(client, { ...STORE_MIGRATIONS, folder: options.folder ?? MIGRATIONS_FOLDER }, {
        settings: { 'retrysafe.store_layout': options.layout ?? 'plain' },
      });
      const demo = await applyMigrations(client, DEMO_MIGRATIONS);
      const server = await applyMigrations(client, SERVER_MIGRATIONS);
      const dashboardGrants = await applyDashboardGrants(client);
      return { applied: [...store.applied, ...demo.applied, ...server.applied], current: store.current, dashboardGrants };
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [lockKey]);
    }
  } finally {
    await client.end();
  }
}

/** The layout the database has: partitioned when idempotency_keys is a partitioned table (the store's own reading of it). */
export function detectStoreLayout(db: pg.ClientBase | pg.Pool): Promise<StoreLayout> {
  return detectLayout(db);
}
