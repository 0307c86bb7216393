-- Hand-written: the store's own schema. Everything of the store lives in schema retrysafe (the
-- migrator runs every migration with retrysafe first on its search_path, so unqualified names
-- land there), so it can share a database with an application that has tables called tenants
-- or payments and a Drizzle journal of its own. An install from before (everything in public,
-- journal drizzle.__drizzle_migrations) was moved here by the migrator's legacy upgrade
-- (packages/store/src/legacy.ts) before this runs.
--
-- Every function resolves names in retrysafe only (and pg_temp last), whatever the caller's
-- search_path: an adopting service's pool has its own, and the statements of @retrysafe/store
-- name retrysafe explicitly.
CREATE OR REPLACE FUNCTION retrysafe_store_schema_version() RETURNS integer
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS 'SELECT 3';
--> statement-breakpoint
DO $$
DECLARE
  fn regprocedure;
BEGIN
  FOR fn IN SELECT p.oid::regprocedure FROM pg_proc p WHERE p.pronamespace = 'retrysafe'::regnamespace LOOP
    EXECUTE format('ALTER FUNCTION %s SET search_path = retrysafe, pg_temp', fn);
  END LOOP;
END $$;
