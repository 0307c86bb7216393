// Connection pools. The owner pool serves the store, the demo API and migrations;
// the dashboard gets its own restricted role once the auth work lands. (Queries are
// named pg statements; Drizzle is used for the schema and migrations.)
import pg from 'pg';

export interface PoolOptions {
  /** Shown in pg_stat_activity, so an operator can tell the app's connections apart. */
  applicationName: string;
  max?: number;
  connectionTimeoutMillis?: number;
  /** More client settings, e.g. the store's (STORE_POOL_SETTINGS: session options, pipelining). */
  client?: Pick<pg.PoolConfig, 'options' | 'pipeline'>;
}

export function createPool(connectionString: string, options: PoolOptions): pg.Pool {
  const pool = new pg.Pool({
    connectionString,
    application_name: options.applicationName,
    max: options.max ?? 10,
    connectionTimeoutMillis: options.connectionTimeoutMillis ?? 5_000,
    idleTimeoutMillis: 30_000,
    ...options.client,
  });
  // An idle client losing its connection (server restart) must not crash the process;
  // the pool discards it and the next checkout reconnects.
  pool.on('error', () => undefined);
  return pool;
}
