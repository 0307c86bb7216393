// The server's tests clone the run's migrated template (test/setup/global.ts: the store's, the
// demo's and the server's sets, the dashboard role) through the package's database helper, with
// the server's search path, and add what the server has beyond the store: the dashboard's
// restricted role and sign-in's pool.
import pg from 'pg';
import { afterAll, beforeAll, inject } from 'vitest';
import { AUTH_SESSION_OPTIONS, DASHBOARD_LOGIN } from '../../db/dashboard-access';
import type { PoolerMode } from '@retrysafe/store/postgres';
import {
  createTestDatabase as createStoreTestDatabase,
  useTestDatabase as useStoreTestDatabase,
  type CreateOptions,
  type StoreLayout,
  type TestDatabase as StoreTestDatabase,
} from '../../packages/store/test/helpers/database';

export { layouts, runnable, storeConnections, type StoreConnection, type StoreLayout } from '../../packages/store/test/helpers/database';

/** The server's pools look in retrysafe, retrysafe_demo and retrysafe_server first (db/client.ts); so do its tests. */
const SERVER_SEARCH_PATH = 'retrysafe, retrysafe_demo, retrysafe_server, public';

export interface TestDatabase extends StoreTestDatabase {
  /** The same database as the dashboard's restricted role (no response bodies, no store writes). */
  dashboardUrl: string;
  /** As sign-in's pool is: the owner's connection string, in the auth role (AUTH_SESSION_OPTIONS). */
  authPool: pg.Pool;
}

/**
 * A fresh database: a copy of the migrated template (in the given layout), or with `empty`, one
 * with no schema at all. With `serverSearchPath: false` its connections keep Postgres's default
 * search path (an adopter's database, where only @retrysafe/store's own schema-qualified statements run).
 */
export function createTestDatabase(options: Omit<CreateOptions, 'searchPath'> & { serverSearchPath?: boolean } = {}): Promise<{ url: string; drop(): Promise<void> }> {
  return createStoreTestDatabase({ ...options, searchPath: options.serverSearchPath === false ? false : SERVER_SEARCH_PATH });
}

/** Registers beforeAll/afterAll hooks; the returned object is filled in before the first test. */
export function useTestDatabase(layout: StoreLayout = 'plain', options: { pooler?: boolean | PoolerMode } = {}): TestDatabase {
  const handle = useStoreTestDatabase(layout, { ...options, searchPath: SERVER_SEARCH_PATH }) as TestDatabase;
  // Runs after the store's hook has created the database (hooks run in the order registered).
  beforeAll(() => {
    handle.dashboardUrl = dashboardUrlFor(handle.url);
    handle.authPool = authPoolFor(handle.url);
  });
  afterAll(async () => {
    await (handle.authPool as pg.Pool | undefined)?.end();
  });
  return handle;
}

/** A pool on `url` (the owner's) in sign-in's role, as the server opens it. */
export function authPoolFor(url: string, max = 8): pg.Pool {
  return new pg.Pool({ connectionString: url, max, options: AUTH_SESSION_OPTIONS });
}

/** `url`'s database reached as the dashboard's login role. */
export function dashboardUrlFor(url: string): string {
  const dashboard = new URL(url);
  dashboard.username = DASHBOARD_LOGIN;
  dashboard.password = inject('dashboardPassword');
  return dashboard.toString();
}
