// Installs from before the store's own journal were migrated by Drizzle's migrator, which
// recorded each migration in drizzle.__drizzle_migrations by the time drizzle-kit created it
// (the journal's `when`) and the file's hash. The first run of this package's migrator copies
// the entries that are the store's (matched by that time, so a foreign application's Drizzle
// entries in the same table are never taken for ours) into retrysafe.migrations, so an old
// database is upgraded from where it stands, not re-migrated from 0000. In the same transaction
// its objects move from public to their schemas (the store's to retrysafe, the demo's to
// retrysafe_demo: ALTER ... SET SCHEMA keeps rows, indexes, grants, owned sequences and
// triggers), before any later migration looks for them there. Drizzle's table itself is left
// as it is: another application may share it. The lists below are history: what the Drizzle-era
// migrations put in public, which then all came from this package. The operator and sign-in
// tables land in retrysafe as 0017-0027 expect them, and the Retrysafe server's own set (its
// 0001) moves them on to retrysafe_server; a fresh install never creates them here (0028).

import type pg from 'pg';

interface LegacyMigration {
  tag: string;
  when: number;
}

/** The tables the Drizzle-era migrations (0000-0016) created in public, the dashboard's included (see above). */
export const LEGACY_STORE_TABLES = [
  'idempotency_keys',
  'idempotency_key_usage',
  'sweep_runs',
  'sweep_run_scopes',
  'endpoint_policies',
  'endpoint_policy_history',
  'audit_log',
  'flow_counts_minute',
  'flow_counts_hour',
  'claim_latency_minute',
  'claim_latency_hour',
  'store_stats',
  'store_stats_scopes',
  'operators',
  'operator_accounts',
  'operator_sessions',
  'operator_verifications',
  'sign_in_throttle',
];
/** The demo API's, which the store's migration 0001 created before they had a set of their own. */
export const LEGACY_DEMO_TABLES = ['tenants', 'payments', 'refunds'];

/**
 * Moves a Drizzle-era install's objects out of public: the key table's partitions and the store's
 * tables to retrysafe, its functions (retrysafe_*, and the audit trigger's) too, the demo's
 * tables to retrysafe_demo. Only names the store created; anything else in public stays.
 */
const MOVE_LEGACY_OBJECTS = `DO $$
DECLARE
  name text;
  fn regprocedure;
BEGIN
  CREATE SCHEMA IF NOT EXISTS retrysafe_demo;
  FOR name IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
              WHERE i.inhparent = 'public.idempotency_keys'::regclass AND c.relnamespace = 'public'::regnamespace LOOP
    EXECUTE format('ALTER TABLE public.%I SET SCHEMA retrysafe', name);
  END LOOP;
  FOREACH name IN ARRAY ARRAY['${LEGACY_STORE_TABLES.join("', '")}'] LOOP
    IF to_regclass(format('public.%I', name)) IS NOT NULL THEN
      EXECUTE format('ALTER TABLE public.%I SET SCHEMA retrysafe', name);
    END IF;
  END LOOP;
  FOREACH name IN ARRAY ARRAY['${LEGACY_DEMO_TABLES.join("', '")}'] LOOP
    IF to_regclass(format('public.%I', name)) IS NOT NULL THEN
      EXECUTE format('ALTER TABLE public.%I SET SCHEMA retrysafe_demo', name);
    END IF;
  END LOOP;
  FOR fn IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'public'::regnamespace AND (p.proname LIKE 'retrysafe\_%' OR p.proname = 'audit_log_refuse_change') LOOP
    EXECUTE format('ALTER FUNCTION %s SET SCHEMA retrysafe', fn);
  END LOOP;
END $$`;

/**
 * Copies the store's Drizzle-era journal entries into \`journal\` when that is still empty, and
 * moves that install's objects to their schemas; returns the tags imported. Runs under the
 * migrator's advisory lock, in one transaction.
 */
export async function importLegacyJournal(client: Pick<pg.ClientBase, 'query'>, journal: string, migrations: LegacyMigration[]): Promise<string[]> {
  const { rows } = await client.query<{ legacy: boolean; empty: boolean }>(
    `SELECT to_regclass('drizzle.__drizzle_migrations') IS NOT NULL AND to_regclass('public.idempotency_keys') IS NOT NULL AS legacy,
            NOT EXISTS (SELECT 1 FROM ${journal}) AS empty`,
  );
  if (!rows[0]?.legacy || !rows[0].empty) return [];
  const recorded = await client.query<{ created_at: string; hash: string }>('SELECT created_at::text AS created_at, hash FROM drizzle.__drizzle_migrations');
  const hashByTime = new Map(recorded.rows.map((row) => [Number(row.created_at), row.hash]));
  const imported = migrations.filter((migration) => hashByTime.has(migration.when));
  if (imported.length === 0) return [];
  await client.query('BEGIN');
  try {
    for (const migration of imported) {
      await client.query(`INSERT INTO ${journal} (name, hash) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, [migration.tag, hashByTime.get(migration.when)]);
    }
    await client.query(MOVE_LEGACY_OBJECTS);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  }
  return imported.map((migration) => migration.tag);
}
