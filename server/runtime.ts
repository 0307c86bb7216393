// The server's one composition root. createServerRuntime() builds, from one reading of the
// environment, everything an instance opens on the database: the owner's pool (`retrysafe-app`:
// the demo API, health, the shared duties), the store's (`retrysafe-store`) with the store, its
// flow recorder and quota, the sweeper and the periodic duties, the dashboard's pools
// (`retrysafe-dashboard`, `-dashboard-read` on a standby) and sign-in's (`retrysafe-auth`), a
// standby's lag reader, and the database itself when the caller hands it over (embedded
// Postgres). Pools open connections on first use, within DATABASE_CONNECTIONS
// (server/connection-budget.ts). One stop() closes all of it, in order:
//   1. the duties (demo traffic, sweeper, roll-ups, statistics, alert history),
//   2. the recorder's and the quota's last flush (the package's stop()), then the store's pool,
//   3. the dashboard's pools, sign-in's, the standby's, a sweeper's own session pool,
//   4. the owner's pool,
//   5. last, the database it was given (an embedded cluster is left, and stopped by the last process out).
// The HTTP front (scripts/serve.ts) stops accepting and drains before it calls stop().
//
// Who uses it: Next's route handlers, pages and server actions through app/_lib/runtime.ts (the
// one global bridge: server/runtime-bridge.ts), the HTTP front to stop it, the CLI and `npm start`'s
// pre-flight with only the owner's pool (their own application_name) and the database they opened.
import type pg from 'pg';
import { createPool } from '../db/client';
import { sessionUrl } from '../db/topology';
import { readEnvironment, requireDashboardSettings, requireDatabaseUrl, type DashboardSettings, type Environment } from './config';
import { connectionBudget } from './connection-budget';
import { describeError, logConnectionLost, logger } from './logging';
import { createAuthPool, createDashboardPools, type DashboardPools } from './dashboard-pools';
import type { OperatorAuth } from './auth/operator-auth';
import type { Booted, Services } from './runtime-services';

export type { Services } from './runtime-services';

/** The dashboard's side: its role's pools, sign-in's pool and the operator auth on it. */
export interface Dashboard {
  pools: DashboardPools;
  /** Sign-in's pool (AUTH_ROLE): credentials and sessions, nothing else. */
  authPool: pg.Pool;
  auth: OperatorAuth;
  publicUrl: string;
}

export interface ServerRuntime {
  readonly environment: Environment;
  /** The owner's pool, usable before (and without) a successful boot, e.g. for health checks and the CLI. */
  readonly ownerPool: pg.Pool;
  /** The database's URL (the owner's): DATABASE_URL, or the one the caller opened. */
  readonly databaseUrl: string;
  /** The store, its duties and the demo API, booted on first call; a failed boot is retried on the next. */
  services(): Promise<Services>;
  /** The dashboard's pools and operator auth, made on first call (no connection opens until a query). */
  dashboard(): Dashboard;
  /**
   * A pool for a duty that holds a session advisory lock (the sweeper): DATABASE_DIRECT_URL when
   * DATABASE_URL is pooled. Throws SessionDutyRefused through a transaction pooler without one.
   */
  sessionPool(duty: string): pg.Pool;
  /** Closes everything this runtime opened, in order (the module's comment); later calls share the first. */
  stop(): Promise<RuntimeStopped>;
}

export interface RuntimeStopped {
  /** The connections each pool held when stop() closed it, by application_name. */
  connectionsClosed: Record<string, number>;
}

export interface ServerRuntimeOptions {
  environment?: Environment;
  /** The database's URL when not DATABASE_URL (the embedded cluster `npm start` and the CLI opened). */
  databaseUrl?: string;
  /** Released by stop(), after every pool: the caller hands over the database it opened. */
  database?: { release(): Promise<void> };
  /**
   * The owner pool for a tool rather than a server (the CLI, `npm start`'s pre-flight): its name
   * in pg_stat_activity, its size, how long an idle connection stays, and no request-path
   * timeouts (a migration or a sweep may take longer than a request may). Default: `retrysafe-app`,
   * its share of DATABASE_CONNECTIONS, with the request path's timeouts.
   */
  owner?: { applicationName: string; max: number; idleTimeoutMillis?: number };
  /**
   * Makes the dashboard's operator auth on sign-in's pool (createOperatorAuth, with whatever the
   * framework adds: Next's cookie plugin, from app/_lib/runtime.ts). Given by the caller, so a
   * runtime without a dashboard (the CLI, `npm start`'s pre-flight) never loads better-auth.
   * Without it, dashboard() refuses.
   */
  operatorAuth?: (pool: pg.Pool, settings: DashboardSettings) => OperatorAuth;
}

export class RuntimeStopping extends Error {
  constructor() {
    super('the server is stopping');
    this.name = 'RuntimeStopping';
  }
}

/**
 * The request path never waits unboundedly on the database: 2 s for a connection, the
 * configured statement timeout on the server, and 2 s more on the client (a server it cannot
 * reach answers nothing). Each failure answers 503 with Retry-After (the package's problemFor).
 */
export function requestPathTimeouts(statementTimeoutMs: number): { connectionTimeoutMillis: number; statementTimeoutMs: number; queryTimeoutMs: number } {
  return { connectionTimeoutMillis: 2_000, statementTimeoutMs, queryTimeoutMs: statementTimeoutMs + 2_000 };
}

export function logEvent(level: 'info' | 'error', message: string, fields: Record<string, unknown> = {}): void {
  // Only identifiers and counts: nothing from a request or a stored response is ever logged
  // (and the logger redacts keys, credentials and bodies should one slip in).
  logger[level](fields, message);
}

/** Builds the server's runtime. Nothing connects yet: each pool opens connections on first use. */
export function createServerRuntime(options: ServerRuntimeOptions = {}): ServerRuntime {
  const environment = options.environment ?? readEnvironment();
  const databaseUrl = options.databaseUrl ?? requireDatabaseUrl(environment);
  const budget = connectionBudget(environment.DATABASE_CONNECTIONS);
  const ownerPool = createPool(databaseUrl, {
    onConnectionLost: logConnectionLost,
    ...(options.owner ?? { applicationName: 'retrysafe-app', max: budget.app, ...requestPathTimeouts(environment.DATABASE_STATEMENT_TIMEOUT_MS) }),
  });
  let booting: Promise<Booted> | undefined;
  let dashboard: Dashboard | undefined;
  const sessionPools = new Map<string, pg.Pool>();
  let stopping: Promise<RuntimeStopped> | undefined;

  const runtime: ServerRuntime = {
    environment,
    ownerPool,
    databaseUrl,
    async services() {
      if (stopping) throw new RuntimeStopping();
      // The store, the demo API and the duties load on first use: the CLI and the launcher never need them.
      booting ??= import('./runtime-services').then(({ boot }) => boot(runtime)).catch((error: unknown) => {
        booting = undefined;
        throw error;
      });
      return (await booting).services;
    },
    dashboard() {
      if (stopping) throw new RuntimeStopping();
      if (!dashboard) {
        if (!options.operatorAuth) throw new Error('this runtime was made without a dashboard (no operatorAuth)');
        const settings = requireDashboardSettings(environment);
        // Writes on the primary; reads on DASHBOARD_READ_URL's standby when set (npm start checked it is one).
        const pools = createDashboardPools(settings);
        // Sign-in and sessions through their own role (db/dashboard-access.ts: AUTH_ROLE), reached from the owner.
        const authPool = createAuthPool(databaseUrl, budget.auth);
        try {
          dashboard = { pools, authPool, auth: options.operatorAuth(authPool, settings), publicUrl: settings.publicUrl };
        } catch (error) {
          void Promise.allSettled([pools.end(), authPool.end()]);
          throw error;
        }
      }
      return dashboard;
    },
    sessionPool(duty) {
      if (stopping) throw new RuntimeStopping();
      const url = sessionUrl(environment, databaseUrl, duty);
      if (url === databaseUrl) return ownerPool;
      let pool = sessionPools.get(url);
      if (!pool) {
        pool = createPool(url, { applicationName: 'retrysafe-sweeper', max: 2, onConnectionLost: logConnectionLost });
        sessionPools.set(url, pool);
      }
      return pool;
    },
    stop() {
      stopping ??= (async () => {
        const booted = await booting?.catch(() => undefined);
        // What each pool held when it was closed, said once at the end (pg_stat_activity's names).
        const closed: Record<string, number> = {};
        const counted = (pool: pg.Pool) => {
          const name = (pool.options as { application_name?: string }).application_name ?? 'unnamed';
          closed[name] = (closed[name] ?? 0) + pool.totalCount;
          return name;
        };
        const failed = (what: string) => (error: unknown) => logEvent('error', `closing ${what} failed`, { error: describeError(error) });
        const close = async (pool: pg.Pool | undefined) => {
          if (!pool || pool.ended) return;
          const name = counted(pool);
          await pool.end().catch(failed(name));
        };
        const closeDashboard = async (pools: DashboardPools) => {
          counted(pools.pool);
          if (pools.onReplica) counted(pools.readPool);
          // Its Redis or MySQL clients too (DASHBOARD_KEYS_REDIS, DASHBOARD_KEYS_MYSQL).
          await pools.end().catch(failed('the dashboard\'s pools'));
        };
        // 1. The duties, 2. the last flush of the recorder and the quota, then the store's pool.
        await booted?.stopDuties();
        await close(booted?.storePool);
        // 3. The dashboard's, sign-in's, the standby's and the session duties' pools.
        await Promise.all([
          dashboard ? closeDashboard(dashboard.pools) : undefined,
          close(dashboard?.authPool),
          booted?.replicaLag?.end().catch(failed('the standby\'s lag reader')),
          ...[...sessionPools.values()].map(close),
        ]);
        // 4. The owner's pool, 5. the database last.
        await close(ownerPool);
        await options.database?.release().catch(failed('the database'));
        return { connectionsClosed: closed };
      })();
      return stopping;
    },
  };
  return runtime;
}

