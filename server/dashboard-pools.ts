// The dashboard's pools: its restricted role on the primary (every write: audit rows, policy
// edits, releases, operator changes, sign-in's bookkeeping), the same role on a hot standby for
// its reads when DASHBOARD_READ_URL is set (the primary otherwise), and the key records read
// through the store's KeyRecordReads on the reads' pool with their audit rows on the primary.
// Sign-in's own pool (AUTH_ROLE, reached from the owner) stays on the primary.
import pg from 'pg';
import { PostgresKeyReads } from '@retrysafe/store';
import { createPool, DASHBOARD_POOL_IDLE_MS, DASHBOARD_POOL_MAX } from '../db/client';
import { AUTH_ROLE, DASHBOARD_ROLE } from '../db/dashboard-access';
import { SERVER_SEARCH_PATH } from '../db/topology';
import type { Queryable } from '@retrysafe/store/postgres';
import { ConfigurationError, type DashboardSettings, type Environment } from './config';
import { logConnectionLost } from './logging';
import type { KeyAccess } from './idempotency/key-metadata';
import { readReplicaLag, type ReplicaLag } from './metrics/replica-lag';
import { openKeyBackends, routedKeyReads } from './key-backends';
import { withAuditedRelease } from './retention/stale-claims';

/** application_name of the dashboard's connections, as pg_stat_activity shows them on each server. */
export const DASHBOARD_APPLICATION = 'retrysafe-dashboard';
export const DASHBOARD_READ_APPLICATION = 'retrysafe-dashboard-read';

/**
 * The read URL's credentials: DASHBOARD_READ_URL's own user (and password) when it names one,
 * else DASHBOARD_DATABASE_URL's, so a standby is usually given by its address alone
 * (`postgres://standby:5432`). Roles replicate from the primary, so the dashboard's role and its
 * column grants (no response bodies) hold on the standby too; checkReadReplica refuses a role
 * that could read a body. Without a database name in its path, DASHBOARD_DATABASE_URL's.
 */
export function dashboardReadUrl(readUrl: string, dashboardUrl: string): string {
  const read = new URL(readUrl);
  const primary = new URL(dashboardUrl);
  if (read.username === '') {
    read.username = primary.username;
    read.password = primary.password;
  }
  if (read.pathname === '' || read.pathname === '/') read.pathname = primary.pathname;
  return read.toString();
}

/** Where DASHBOARD_READ_URL points, for messages: host and port, never credentials. */
function placeOf(url: string): string {
  const parsed = new URL(url);
  return `${parsed.hostname}:${parsed.port || '5432'}${parsed.pathname}`;
}

const problem = (what: string) => new ConfigurationError(`DASHBOARD_READ_URL (${what})`);

/**
 * Refuses, in one line naming DASHBOARD_READ_URL and within `timeoutMs`, a read URL that is not
 * a hot standby of the dashboard's primary: unreachable, refusing the dashboard's role, not in
 * recovery (a primary, or a promoted standby), a standby of another cluster (its
 * system_identifier differs), or a role there that may select response bodies.
 */
export async function checkReadReplica(readUrl: string, dashboardUrl: string, timeoutMs = 5_000): Promise<void> {
  const url = dashboardReadUrl(readUrl, dashboardUrl);
  const place = placeOf(url);
  const ask = async <T extends pg.QueryResultRow>(connectionString: string, text: string): Promise<T | undefined> => {
    const client = new pg.Client({ connectionString, connectionTimeoutMillis: timeoutMs, query_timeout: timeoutMs, application_name: 'retrysafe-start' });
    client.on('error', () => undefined); // a connection lost after the answer
    await client.connect();
    try {
      return (await client.query<T>(text)).rows[0];
    } finally {
      await client.end().catch(() => undefined);
    }
  };
  type Standby = { recovering: boolean; system: string; reads_bodies: boolean | null };
  let standby: Standby | undefined;
  try {
    standby = await ask<Standby>(
      url,
      `SELECT pg_is_in_recovery() AS recovering, (SELECT system_identifier::text FROM pg_control_system()) AS system,
              has_column_privilege(to_regclass('retrysafe.idempotency_keys'), 'response_body', 'SELECT') AS reads_bodies`,
    );
  } catch (error) {
    throw problem(`${place}): cannot reach the standby as the dashboard's role: ${reasonOf(error)}`);
  }
  if (!standby) throw problem(`${place}): no answer`);
  if (!standby.recovering) {
    throw problem(`${place}) is not in recovery: it must be a hot standby of the primary (pg_is_in_recovery() is false there: a primary, or a promoted standby)`);
  }
  if (standby.reads_bodies === null) throw problem(`${place}) has no retrysafe.idempotency_keys: is it a standby of this database?`);
  if (standby.reads_bodies) throw problem(`${place}): its role may select response bodies; use the dashboard's role (leave the user out to inherit DASHBOARD_DATABASE_URL's)`);
  let primary: { system: string } | undefined;
  try {
    primary = await ask<{ system: string }>(dashboardUrl, 'SELECT system_identifier::text AS system FROM pg_control_system()');
  } catch {
    return; // the primary's own reachability is DASHBOARD_DATABASE_URL's and DATABASE_URL's to report
  }
  if (primary && primary.system !== standby.system) {
    throw problem(`${place}) is a standby of another cluster (system identifier ${standby.system}, the primary's is ${primary.system})`);
  }
}

/**
 * Refuses, in one line naming DASHBOARD_DATABASE_URL and the statement that fixes it, a dashboard
 * role that could not serve the dashboard: one that is not a member of the grants' group role
 * (DASHBOARD_ROLE), or whose search_path does not reach the store's schema. Connected the way the
 * dashboard's pool connects (createPool: its search_path sent at connect, or the role's own through
 * a transaction pooler). Without this, the server started and every sign-in answered 500 (42P01).
 */
export async function checkDashboardRole(dashboardUrl: string, timeoutMs = 10_000): Promise<void> {
  const pool = createPool(dashboardUrl, { applicationName: 'retrysafe-start', max: 1, connectionTimeoutMillis: timeoutMs, queryTimeoutMs: timeoutMs });
  pool.on('error', () => undefined); // a connection lost after the answer
  type Role = { login: string; database: string; group_exists: boolean; member: boolean | null; search_path: string; unusable_schemas: string[]; reaches: boolean };
  let role: Role | undefined;
  try {
    role = (
      await pool.query<Role>(
        `SELECT current_user::text AS login, current_database()::text AS database,
                EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1) AS group_exists,
                (SELECT pg_has_role(current_user, r.oid, 'USAGE') FROM pg_roles r WHERE r.rolname = $1) AS member,
                current_setting('search_path') AS search_path,
                -- The store's and the server's schemas that exist but the role may not use (their grants not applied).
                ARRAY(SELECT n.nspname::text FROM pg_namespace n WHERE n.nspname IN ('retrysafe', 'retrysafe_server')
                      AND NOT has_schema_privilege(n.oid, 'USAGE') ORDER BY 1) AS unusable_schemas,
                to_regclass('operators') IS NOT NULL AND to_regclass('operators') = to_regclass('retrysafe_server.operators')
                  AND to_regclass('idempotency_keys') IS NOT NULL AND to_regclass('idempotency_keys') = to_regclass('retrysafe.idempotency_keys') AS reaches`,
        [DASHBOARD_ROLE],
      )
    ).rows[0];
  } catch (error) {
    throw new ConfigurationError(`DASHBOARD_DATABASE_URL: cannot check the dashboard's role: ${reasonOf(error)}`);
  } finally {
    await pool.end().catch(() => undefined);
  }
  if (!role) throw new ConfigurationError("DASHBOARD_DATABASE_URL: cannot check the dashboard's role: no answer");
  const login = `"${role.login.replaceAll('"', '""')}"`;
  if (!role.group_exists) {
    throw new ConfigurationError(
      `DASHBOARD_DATABASE_URL: the role ${DASHBOARD_ROLE} does not exist in this cluster, so the dashboard's role has no grants: have a DBA run the SQL printed by \`npm run cli -- db grants\`, then GRANT ${DASHBOARD_ROLE} TO ${login}`,
    );
  }
  if (!role.member) {
    throw new ConfigurationError(
      `DASHBOARD_DATABASE_URL: its role ${login} is not a member of ${DASHBOARD_ROLE} (or does not inherit its privileges), so it cannot read the dashboard's tables and every sign-in would fail: run GRANT ${DASHBOARD_ROLE} TO ${login} (and ALTER ROLE ${login} INHERIT if it is NOINHERIT)`,
    );
  }
  if (role.unusable_schemas.length > 0) {
    // Its search_path may be right: without USAGE the tables are not found through it either.
    throw new ConfigurationError(
      `DASHBOARD_DATABASE_URL: its role ${login} may not use the schema ${role.unusable_schemas.join(' and ')} (no USAGE: the dashboard's grants were not applied to this database), so every sign-in would fail: have a DBA run the SQL printed by \`npm run cli -- db grants\``,
    );
  }
  if (!role.reaches) {
    throw new ConfigurationError(
      `DASHBOARD_DATABASE_URL: its role ${login} starts with search_path "${role.search_path}", which does not reach the retrysafe and retrysafe_server schemas: run ALTER ROLE ${login} IN DATABASE "${role.database.replaceAll('"', '""')}" SET search_path = ${SERVER_SEARCH_PATH}`,
    );
  }
}

/** A short reason without connection strings: the driver's code or message. */
function reasonOf(error: unknown): string {
  const code = (error as { code?: unknown }).code;
  const message = error instanceof Error ? error.message : String(error);
  return typeof code === 'string' && code !== '' ? `${message} (${code})` : message;
}

export interface DashboardPools {
  /** The dashboard's role on the primary: everything that writes, and reads that must see a write at once. */
  pool: pg.Pool;
  /** The dashboard's role on the standby (DASHBOARD_READ_URL), or `pool` itself without one. */
  readPool: pg.Pool;
  /** True when readPool is a standby's. */
  onReplica: boolean;
  /** Key records on readPool, their audit rows (and releases) on the primary. */
  keys: KeyAccess;
  /** The standby's lag behind the primary (readReplicaLag); undefined without a standby. */
  replicaLag: (() => Promise<ReplicaLag>) | undefined;
  /** Closes the dashboard's pools (not authPool's). */
  end(): Promise<void>;
}

/** The dashboard's pools from its settings (requireDashboardSettings). Connections open on first use. */
export function createDashboardPools(settings: Pick<DashboardSettings, 'databaseUrl' | 'readUrl' | 'keysRedis' | 'keysMysql' | 'poolMax'>): DashboardPools {
  const options = { max: settings.poolMax ?? DASHBOARD_POOL_MAX, idleTimeoutMillis: DASHBOARD_POOL_IDLE_MS, onConnectionLost: logConnectionLost };
  const pool = createPool(settings.databaseUrl, { applicationName: DASHBOARD_APPLICATION, ...options });
  const readPool = settings.readUrl === undefined ? pool : createPool(dashboardReadUrl(settings.readUrl, settings.databaseUrl), { applicationName: DASHBOARD_READ_APPLICATION, ...options });
  const onReplica = readPool !== pool;
  // Key records read on readPool (the standby's, when there is one); the one write among them, an
  // operator's release of a stale claim, on the primary with its audit row in the same transaction.
  const postgresReads = withAuditedRelease(new PostgresKeyReads(readPool), pool);
  // Services whose keys are in Redis or MySQL (DASHBOARD_KEYS_REDIS, DASHBOARD_KEYS_MYSQL): their policies read on readPool.
  const elsewhere = openKeyBackends({ redis: settings.keysRedis, mysql: settings.keysMysql }, readPool);
  return {
    pool,
    readPool,
    onReplica,
    keys: { reads: routedKeyReads(postgresReads, elsewhere.byService), audit: pool, trace: readPool, keptElsewhere: new Set(elsewhere.byService.keys()),
      storeFigures: elsewhere.storeFigures,
      ...(elsewhere.staleElsewhere ? { staleElsewhere: elsewhere.staleElsewhere } : {}),
    },
    replicaLag: onReplica ? () => readReplicaLag(pool, readPool) : undefined,
    async end() {
      await Promise.all([pool.end(), onReplica ? readPool.end() : undefined, elsewhere.end()]);
    },
  };
}

/** Sign-in's pool (AUTH_ROLE, db/dashboard-access.ts), reached from the owner's URL, on the primary; `max`: its share of DATABASE_CONNECTIONS. */
export function createAuthPool(ownerUrl: string, max = 5): pg.Pool {
  return createPool(ownerUrl, { applicationName: 'retrysafe-auth', max, role: AUTH_ROLE, onConnectionLost: logConnectionLost });
}

/**
 * For the server's /api/metrics (server/runtime-services.ts): the standby's lag read on one connection
 * of the dashboard's role there and `primary` (any pool on the primary); undefined without
 * DASHBOARD_READ_URL (or without DASHBOARD_DATABASE_URL, whose credentials it may inherit).
 */
export function createReplicaLagReader(
  environment: Pick<Environment, 'DASHBOARD_READ_URL' | 'DASHBOARD_DATABASE_URL'>,
  primary: Queryable,
): { read: () => Promise<ReplicaLag>; end: () => Promise<void> } | undefined {
  if (environment.DASHBOARD_READ_URL === undefined || environment.DASHBOARD_DATABASE_URL === undefined) return undefined;
  const standby = createPool(dashboardReadUrl(environment.DASHBOARD_READ_URL, environment.DASHBOARD_DATABASE_URL), {
    applicationName: 'retrysafe-metrics-standby',
    max: 1,
    connectionTimeoutMillis: 2_000,
    queryTimeoutMs: 2_000,
    onConnectionLost: logConnectionLost,
  });
  return { read: () => readReplicaLag(primary, standby), end: () => standby.end() };
}
