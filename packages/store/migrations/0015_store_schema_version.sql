-- The store's schema version, for @retrysafe/store: a service built on the package reads it
-- when it starts (createRetrysafe) and refuses a database whose store tables are older or newer
-- than the ones its statements are written for, saying which and how to migrate. Bumped by
-- every later migration that changes what the store's request-path statements touch (the key
-- table, its functions, the quota and flow-metric tables); migrations of the dashboard alone
-- (operators, audit, sessions) leave it.
CREATE OR REPLACE FUNCTION retrysafe_store_schema_version() RETURNS integer
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS 'SELECT 1';
