// Which connection each of the server's duties uses, and a check, once at start, that the
// database settings say what the connections are. The request path (store, demo API,
// dashboard, sign-in) runs on DATABASE_URL, direct or through a transaction-mode pooler
// (DATABASE_POOLER=transaction, or transaction-prepared where the pooler tracks named statements); duties that need a session of their own (migrations and the
// sweeper, each behind a session advisory lock) run on DATABASE_DIRECT_URL, else DATABASE_URL
// when it is direct, and refuse to start, saying why, when neither is.
import pg from 'pg';
import { behindTransactionPooler, TRANSACTION_POOLER_REFUSAL } from '@retrysafe/store/migrate';
import { poolerTracksPreparedStatements } from '@retrysafe/store/postgres';
import { ConfigurationError, type DatabaseSettings } from './settings';

type Topology = Pick<DatabaseSettings, 'DATABASE_URL' | 'DATABASE_POOLER' | 'DATABASE_DIRECT_URL'>;

/** A duty that needs a session was refused: DATABASE_URL is pooled and no DATABASE_DIRECT_URL is set. */
export class SessionDutyRefused extends ConfigurationError {}

/** The message of the refusal, for a duty ("migrations", "the sweeper") that holds a session advisory lock. */
export function sessionDutyRefusal(duty: string): string {
  return `${duty} refused: it holds a session advisory lock across transactions, which the transaction pooler at DATABASE_URL (DATABASE_POOLER=transaction) does not keep; set DATABASE_DIRECT_URL to a direct connection to the primary`;
}

/**
 * The URL for a duty that needs a session: DATABASE_DIRECT_URL, else DATABASE_URL unless it is
 * pooled (then SessionDutyRefused). `databaseUrl` is the resolved DATABASE_URL (embedded mode's too).
 */
export function sessionUrl(environment: Topology, databaseUrl: string, duty: string): string {
  if (environment.DATABASE_DIRECT_URL) return environment.DATABASE_DIRECT_URL;
  if (environment.DATABASE_POOLER !== undefined) throw new SessionDutyRefused(sessionDutyRefusal(duty));
  return databaseUrl;
}

/** Where a URL points, for messages: host, port and database, never the user or the password. */
export function describeUrl(url: string): string {
  if (!URL.canParse(url)) return 'an unparsable URL';
  const parsed = new URL(url);
  return `${parsed.hostname}:${parsed.port || '5432'}${parsed.pathname}`;
}

async function probe(setting: 'DATABASE_URL' | 'DATABASE_DIRECT_URL', url: string, connectionTimeoutMillis: number): Promise<boolean> {
  try {
    return await behindTransactionPooler(url, { connectionTimeoutMillis });
  } catch (error) {
    const reason = (error instanceof Error && error.message ? error.message : String(error)).replace(/\s+/g, ' ');
    throw new ConfigurationError(`${setting}: cannot connect to ${describeUrl(url)} (${reason})`);
  }
}

/** DATABASE_DIRECT_URL, when set, must be reachable and direct (or session-pooled). */
export async function checkDirectUrl(environment: Topology, options: { connectionTimeoutMillis?: number } = {}): Promise<void> {
  if (environment.DATABASE_DIRECT_URL && (await probe('DATABASE_DIRECT_URL', environment.DATABASE_DIRECT_URL, options.connectionTimeoutMillis ?? 10_000))) {
    throw new ConfigurationError(`DATABASE_DIRECT_URL ${TRANSACTION_POOLER_REFUSAL}`);
  }
}

/**
 * Connects to DATABASE_URL once, as a person would check it: a database that cannot be
 * reached, or a pooler in another mode than DATABASE_POOLER says, is one line naming the
 * setting (ConfigurationError), not a server that waits and fails elsewhere.
 */
export async function checkDatabaseUrl(environment: Topology, databaseUrl: string, options: { connectionTimeoutMillis?: number } = {}): Promise<void> {
  const pooled = await probe('DATABASE_URL', databaseUrl, options.connectionTimeoutMillis ?? 10_000);
  if (pooled && environment.DATABASE_POOLER === undefined) {
    throw new ConfigurationError(
      'DATABASE_URL goes through a transaction-mode pooler (two connections were served by one database backend): set DATABASE_POOLER=transaction, and DATABASE_DIRECT_URL to a direct connection for migrations and the sweeper',
    );
  }
  if (!pooled && environment.DATABASE_POOLER !== undefined) {
    throw new ConfigurationError(
      `DATABASE_POOLER=${environment.DATABASE_POOLER}, but DATABASE_URL is not a transaction-mode pooler (each connection kept a database backend of its own: a direct connection or a session-mode pool): unset DATABASE_POOLER, or point DATABASE_URL at the pooler in transaction mode`,
    );
  }
  if (environment.DATABASE_POOLER === 'transaction-prepared') {
    const pool = new pg.Pool({ connectionString: databaseUrl, max: 1, connectionTimeoutMillis: options.connectionTimeoutMillis ?? 10_000 });
    try {
      if (!(await poolerTracksPreparedStatements(pool))) {
        throw new ConfigurationError(
          "DATABASE_POOLER=transaction-prepared, but the pooler at DATABASE_URL passes named statements through rather than tracking them (PgBouncer before 1.21, or max_prepared_statements = 0): set max_prepared_statements in the pooler (PgBouncer 1.21 and later; 200 is its default from 1.24), or DATABASE_POOLER=transaction",
        );
      }
    } finally {
      await pool.end();
    }
  }
}

/** What the server's queries need first on their search_path (db/client.ts sends it at connect when it can). */
export const SERVER_SEARCH_PATH = 'retrysafe, retrysafe_demo, retrysafe_server';

/**
 * Through a transaction pooler no startup `options` reach Postgres, so the server's search_path
 * is made each login's own default in this database (ALTER ROLE ... IN DATABASE ... SET), which
 * every backend the pooler opens reads at its start: no statement or round trip added per query
 * (measured against SET LOCAL in each transaction, which adds a statement to every one, and
 * schema-qualifying the server's hundreds of statements). Run over a direct connection as the
 * owner, before the pooler opens backends for these logins (an open one keeps the old default).
 * The owner may always set its own; another login's needs CREATEROLE (else: `failed`, to print).
 */
export async function setPooledSearchPath(directUrl: string, otherLogins: string[]): Promise<{ failed: { login: string; reason: string }[] }> {
  const client = new pg.Client({ connectionString: directUrl, application_name: 'retrysafe-start', connectionTimeoutMillis: 10_000 });
  await client.connect();
  const failed: { login: string; reason: string }[] = [];
  try {
    const set = async (login: string | null) => {
      const { rows } = await client.query<{ statement: string }>(
        `SELECT format('ALTER ROLE %I IN DATABASE %I SET search_path = ${SERVER_SEARCH_PATH}', coalesce($1::text, current_user::text), current_database()) AS statement`,
        [login],
      );
      await client.query(rows[0]?.statement ?? 'SELECT 1');
    };
    await set(null);
    for (const login of otherLogins) {
      await set(login).catch((error: unknown) => failed.push({ login, reason: error instanceof Error ? error.message : String(error) }));
    }
  } finally {
    await client.end();
  }
  return { failed };
}

/**
 * Through the pooler, as `setting`'s login: the search_path a new transaction sees. Anything
 * but the server's is one line saying what to run, not a "relation does not exist" per request.
 */
export async function checkPooledSearchPath(setting: 'DATABASE_URL' | 'DASHBOARD_DATABASE_URL', url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, application_name: 'retrysafe-start', connectionTimeoutMillis: 10_000 });
  await client.connect().catch((error: unknown) => {
    throw new ConfigurationError(`${setting}: cannot connect to ${describeUrl(url)} (${error instanceof Error ? error.message : String(error)})`);
  });
  try {
    const { rows } = await client.query<{ search_path: string; login: string; database: string }>(
      "SELECT current_setting('search_path') AS search_path, session_user AS login, current_database() AS database",
    );
    const found = rows[0];
    if (found && found.search_path.replace(/\s/g, '').startsWith(SERVER_SEARCH_PATH.replace(/\s/g, ''))) return;
    throw new ConfigurationError(
      `${setting}: connections through the transaction pooler start with search_path "${found?.search_path ?? ''}", and the server cannot send its own through it (DATABASE_POOLER is set): run ALTER ROLE "${found?.login ?? ''}" IN DATABASE "${found?.database ?? ''}" SET search_path = ${SERVER_SEARCH_PATH} (npm start does it over DATABASE_DIRECT_URL when its role may), then have the pooler reopen its server connections (PgBouncer: RECONNECT)`,
    );
  } finally {
    await client.end();
  }
}
