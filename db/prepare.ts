// The database side of a start (`npm start`, and every `npm run cli` command): the settings
// checked against what the URLs really are (db/topology.ts), then the migrations over a
// session of their own, or, through a transaction pooler with no DATABASE_DIRECT_URL, a check
// that none is pending (the request path needs no session; migrations do).
import { createPool } from './client';
import { migrateDatabase, migrationStatus, type MigrateResult, type StoreLayout } from './migrate';
import { ConfigurationError, type DatabaseSettings } from './settings';
import { checkDatabaseUrl, checkDirectUrl, checkPooledSearchPath, SessionDutyRefused, sessionUrl, setPooledSearchPath } from './topology';

export type Prepared = { migrated: MigrateResult; refused?: undefined } | { migrated?: undefined; refused: string; current: string | null };

type Settings = Pick<DatabaseSettings, 'DATABASE_URL' | 'DATABASE_POOLER' | 'DATABASE_DIRECT_URL' | 'DASHBOARD_DATABASE_URL'> & { STORE_LAYOUT: StoreLayout };

/** DASHBOARD_DATABASE_URL's login, whose search_path a transaction pooler needs set too. */
function dashboardLogin(environment: Settings): string[] {
  return environment.DASHBOARD_DATABASE_URL ? [decodeURIComponent(new URL(environment.DASHBOARD_DATABASE_URL).username)] : [];
}

/**
 * Checks the settings, then migrates (`migrate: false`: only when nothing is pending, for a
 * command that needs the schema current). `databaseUrl` is DATABASE_URL, or embedded mode's.
 */
export async function prepareDatabase(environment: Settings, databaseUrl: string, say: (line: string) => void): Promise<Prepared> {
  const pooler = environment.DATABASE_POOLER !== undefined;
  await checkDirectUrl(environment);
  if (pooler && environment.DATABASE_DIRECT_URL) {
    // Before anything connects through the pooler: its backends read the roles' settings when they start.
    const { failed } = await setPooledSearchPath(environment.DATABASE_DIRECT_URL, dashboardLogin(environment));
    for (const { login, reason } of failed) say(`Could not set the search_path of ${login} (${reason}): have a DBA run ALTER ROLE "${login}" IN DATABASE <database> SET search_path = retrysafe, retrysafe_demo`);
  }
  await checkDatabaseUrl(environment, databaseUrl);
  let prepared: Prepared;
  try {
    const url = sessionUrl(environment, databaseUrl, 'Migrating');
    prepared = { migrated: await migrateDatabase(url, { layout: environment.STORE_LAYOUT }) };
  } catch (error) {
    if (!(error instanceof SessionDutyRefused)) throw error;
    const pool = createPool(databaseUrl, { applicationName: 'retrysafe-start', max: 1 });
    const status = await migrationStatus(pool).finally(() => pool.end());
    if (status.pending.length > 0) {
      throw new ConfigurationError(`The schema has ${status.pending.length} pending migration(s) (${status.pending.join(', ')}). ${error.message}`);
    }
    prepared = { refused: error.message, current: status.current };
  }
  if (pooler) {
    await checkPooledSearchPath('DATABASE_URL', databaseUrl);
    if (environment.DASHBOARD_DATABASE_URL) await checkPooledSearchPath('DASHBOARD_DATABASE_URL', environment.DASHBOARD_DATABASE_URL);
  }
  return prepared;
}
