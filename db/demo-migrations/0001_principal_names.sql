-- Hand-written: the demo's tenants are its principals, so they get their display names in the
-- store's principal_names (migration 0019 of the store's set, which db/migrate.ts applies
-- first, whole). Tenants created later are named as they are created (server/demo/tenants.ts).
-- Where the store's set was applied only in part (a test's folder that stops early), there is
-- no principal_names yet and nothing to name.
DO $$
BEGIN
  IF to_regclass('retrysafe.principal_names') IS NOT NULL THEN
    INSERT INTO retrysafe.principal_names (principal_id, name)
    SELECT id, name FROM retrysafe_demo.tenants
    ON CONFLICT (principal_id) DO NOTHING;
  END IF;
END $$;
