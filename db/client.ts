// Connection pools. The owner pool serves the store, the demo API and migrations;
// the dashboard gets its own restricted role once the auth work lands. (Queries are
// named pg statements; Drizzle is used for the schema and migrations.)
import pg from 'pg';
import { logger } from '../server/logging';

export interface PoolOptions {
  /** Shown in pg_stat_activity, so an operator can tell the app's connections apart. */
  applicationName: string;
  max?: number;
  /** Longest wait for a new connection or a free pooled one (then 'timeout exceeded when trying to connect'). */
  connectionTimeoutMillis?: number;
  /** How long an idle connection is kept before it is closed (default 30 s). */
  idleTimeoutMillis?: number;
  /**
   * Server-side statement_timeout of every connection (57014 past it). Unset: none.
   * The client-side query timeout below is what ends a wait on an unreachable server.
   */
  statementTimeoutMs?: number;
  /** Client-side: a query with no answer after this long fails ('Query read timeout') and its connection is discarded. Unset: none. */
  queryTimeoutMs?: number;
  /** More client settings, e.g. the store's (STORE_POOL_SETTINGS: session options, pipelining). */
  client?: Pick<pg.PoolConfig, 'options' | 'pipeline'>;
}

/**
 * pg lets the connection string's parameters override the config, so session options given in
 * both (e.g. `?options=-c search_path=app` and the store's) are merged into the URL, not lost.
 */
function withSessionOptions(connectionString: string, options: string | undefined): string {
  if (options === undefined || !URL.canParse(connectionString)) return connectionString;
  const url = new URL(connectionString);
  const given = url.searchParams.get('options');
  if (given === null) return connectionString;
  url.searchParams.set('options', `${given} ${options}`);
  return url.toString();
}

/**
 * The server's own queries (dashboard, sweeper, statistics, demo API) name the store's tables
 * without their schema: its connections look in retrysafe, then the demo's retrysafe_demo.
 * (@retrysafe/store's statements name retrysafe themselves and need no search_path.)
 */
export const SERVER_SEARCH_PATH_OPTIONS = '-c search_path=retrysafe,retrysafe_demo';

/** Connections of the dashboard's pool: an overview's reads run at once on them (the monitoring bench measures with this many). */
export const DASHBOARD_POOL_MAX = 10;
/**
 * How long the dashboard keeps an idle connection: past its slowest auto-refresh (60 s), so a
 * refreshing overview finds its connections open, their statements prepared and their catalog
 * caches warm, rather than opening up to ten new backends each time (with the default 30 s, the
 * default 30 s refresh raced the timeout and the 60 s one always lost).
 */
export const DASHBOARD_POOL_IDLE_MS = 300_000;

export function createPool(connectionString: string, options: PoolOptions): pg.Pool {
  const sessionOptions = [SERVER_SEARCH_PATH_OPTIONS, options.client?.options].filter(Boolean).join(' ');
  const pool = new pg.Pool({
    connectionString: withSessionOptions(connectionString, sessionOptions),
    application_name: options.applicationName,
    max: options.max ?? 10,
    connectionTimeoutMillis: options.connectionTimeoutMillis ?? 5_000,
    idleTimeoutMillis: options.idleTimeoutMillis ?? 30_000,
    // A connection cut by a partition is noticed by the query timeout; keepalive finds idle ones.
    keepAlive: true,
    ...(options.statementTimeoutMs === undefined ? {} : { statement_timeout: options.statementTimeoutMs }),
    ...(options.queryTimeoutMs === undefined ? {} : { query_timeout: options.queryTimeoutMs }),
    ...options.client,
    options: sessionOptions,
  });
  // A connection lost (a server restart, a killed backend) must not crash the process. An idle
  // client's error reaches the pool, which discards it; a checked-out client's reaches its own
  // listener, and the statement it was running (or the next) fails, so its holder releases it
  // as broken. Both are logged: a database going away is worth a line.
  const report = (error: Error) => logger.warn({ pool: options.applicationName, reason: error.message }, 'database connection lost');
  pool.on('error', report);
  pool.on('connect', (client) => client.on('error', report));
  return pool;
}
