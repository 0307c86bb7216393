// Connection pools. The owner pool serves the store, the demo API and migrations;
// the dashboard gets its own restricted role once the auth work lands. (Queries are
// named pg statements; Drizzle is used for the schema and migrations.)
import pg from 'pg';
import { readDatabaseSettings, type DatabaseSettings } from './settings';

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
  /**
   * `transaction`: the URL goes through a transaction-mode pooler (DATABASE_POOLER), so the pool
   * sends no startup parameters (no `options`, no statement_timeout: the pooler would refuse
   * them, and could not keep them per client) and no named statements (a pooler hands each
   * transaction to any server connection, where the name is unknown or another statement's).
   * Default: DATABASE_POOLER for every URL but DATABASE_DIRECT_URL.
   */
  connection?: 'direct' | 'transaction';
  /**
   * A role every statement runs as (sign-in's AUTH_ROLE): SET ROLE at connect on a direct
   * connection; through a transaction pooler, SET LOCAL ROLE in each transaction (a statement
   * outside one gets its own), since a session's role would pass to the pooler's next client.
   */
  role?: string;
  /**
   * Through a transaction pooler: keep the statements' names. Only for the store's own pool with
   * DATABASE_POOLER=transaction-prepared (a pooler that tracks named statements: PgBouncer 1.21
   * and later with max_prepared_statements, checked at start); every other pool sends them unnamed.
   */
  keepStatementNames?: boolean;
  /**
   * Told when a connection of the pool is lost (a server restart, a killed backend), with the
   * pool's applicationName; the server passes logConnectionLost (server/logging.ts). Either way
   * the loss never crashes the process. Default: nothing is said.
   */
  onConnectionLost?: ConnectionLost;
}

export type ConnectionLost = (error: Error, applicationName: string) => void;

/** How a pool on `connectionString` connects, by DATABASE_POOLER and DATABASE_DIRECT_URL. */
export function connectionKind(connectionString: string, environment: Pick<DatabaseSettings, 'DATABASE_POOLER' | 'DATABASE_DIRECT_URL'> = readDatabaseSettings()): 'direct' | 'transaction' {
  if (environment.DATABASE_POOLER === undefined || connectionString === environment.DATABASE_DIRECT_URL) return 'direct';
  return 'transaction';
}

/**
 * Makes every statement of the client unnamed (a plain config's `name` dropped): the same SQL,
 * parsed on each run instead of once per connection, as a transaction pooler requires.
 */
function unnameStatements(client: pg.ClientBase): void {
  const query = client.query.bind(client) as (...args: unknown[]) => unknown;
  const unnamed = (config: unknown, ...rest: unknown[]) => {
    const named = typeof config === 'object' && config !== null && 'name' in config && typeof (config as { submit?: unknown }).submit !== 'function';
    return query(named ? { ...config, name: undefined } : config, ...rest);
  };
  (client as unknown as { query: typeof unnamed }).query = unnamed;
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
export const SERVER_SEARCH_PATH_OPTIONS = '-c search_path=retrysafe,retrysafe_demo,retrysafe_server';

/** Connections of the dashboard's pool: an overview's reads run at once on them (the monitoring bench measures with this many). */
export const DASHBOARD_POOL_MAX = 10;
/**
 * How long the dashboard keeps an idle connection: past its slowest auto-refresh (60 s), so a
 * refreshing overview finds its connections open, their statements prepared and their catalog
 * caches warm, rather than opening up to ten new backends each time (with the default 30 s, the
 * default 30 s refresh raced the timeout and the 60 s one always lost).
 */
export const DASHBOARD_POOL_IDLE_MS = 300_000;

const quoteIdent = (name: string) => `"${name.replaceAll('"', '""')}"`;

type QueryCallback = (error: Error | null, result?: unknown) => void;

/**
 * Runs every statement of the client as `role`, in transactions only: a BEGIN is followed by
 * SET LOCAL ROLE (one round trip, as one simple query), and a statement outside a transaction
 * gets one of its own (BEGIN and the role, the statement, COMMIT).
 */
function runInRole(client: pg.ClientBase, role: string): void {
  const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
  const begin = `BEGIN; SET LOCAL ROLE ${quoteIdent(role)}`;
  let open = false;
  const first = (result: unknown) => (Array.isArray(result) ? (result[0] as unknown) : result);
  const inRole = (config: unknown, values?: unknown, callback?: unknown): Promise<unknown> | undefined => {
    if (typeof config === 'object' && config !== null && typeof (config as { submit?: unknown }).submit === 'function') return query(config, values, callback);
    const done = (typeof values === 'function' ? values : callback) as QueryCallback | undefined;
    const given = typeof values === 'function' ? [] : values === undefined ? [] : [values];
    const text = typeof config === 'string' ? config : ((config as { text?: unknown } | null)?.text ?? '');
    let answer: Promise<unknown>;
    if (typeof text === 'string' && /^\s*(BEGIN|START\s+TRANSACTION)\s*;?\s*$/i.test(text)) {
      open = true;
      answer = query(begin).then(first);
    } else if (typeof text === 'string' && /^\s*(COMMIT|END|ROLLBACK|ABORT)\s*;?\s*$/i.test(text)) {
      open = false;
      answer = query(config, ...given);
    } else if (open) {
      answer = query(config, ...given);
    } else {
      answer = (async () => {
        await query(begin);
        try {
          const result = await query(config, ...given);
          await query('COMMIT');
          return result;
        } catch (error) {
          await query('ROLLBACK').catch(() => undefined);
          throw error;
        }
      })();
    }
    if (!done) return answer;
    answer.then((result) => done(null, result), (error: unknown) => done(error instanceof Error ? error : new Error(String(error))));
    return undefined;
  };
  (client as unknown as { query: typeof inRole }).query = inRole;
}

export function createPool(connectionString: string, options: PoolOptions): pg.Pool {
  const pooled = (options.connection ?? connectionKind(connectionString)) === 'transaction';
  if (pooled) {
    // Only what a transaction pooler passes through: no startup options, no named statements.
    // (The server's search_path comes from its roles' settings then: db/topology.ts.)
    const pool = new pg.Pool({
      connectionString,
      application_name: options.applicationName,
      max: options.max ?? 10,
      connectionTimeoutMillis: options.connectionTimeoutMillis ?? 5_000,
      idleTimeoutMillis: options.idleTimeoutMillis ?? 30_000,
      keepAlive: true,
      ...(options.queryTimeoutMs === undefined ? {} : { query_timeout: options.queryTimeoutMs }),
      ...(options.client?.pipeline === undefined ? {} : { pipeline: options.client.pipeline }),
    });
    pool.on('connect', (client) => {
      if (options.keepStatementNames !== true) unnameStatements(client);
      if (options.role !== undefined) runInRole(client, options.role);
    });
    return reportLostConnections(pool, options.applicationName, options.onConnectionLost);
  }
  const sessionOptions = [SERVER_SEARCH_PATH_OPTIONS, options.client?.options, options.role === undefined ? undefined : `-c role=${options.role}`].filter(Boolean).join(' ');
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
  return reportLostConnections(pool, options.applicationName, options.onConnectionLost);
}

function reportLostConnections(pool: pg.Pool, applicationName: string, onConnectionLost: ConnectionLost | undefined): pg.Pool {
  // A connection lost (a server restart, a killed backend) must not crash the process. An idle
  // client's error reaches the pool, which discards it; a checked-out client's reaches its own
  // listener, and the statement it was running (or the next) fails, so its holder releases it
  // as broken. Both are told to onConnectionLost: a database going away is worth a line.
  const report = (error: Error) => onConnectionLost?.(error, applicationName);
  pool.on('error', report);
  pool.on('connect', (client) => client.on('error', report));
  return pool;
}
