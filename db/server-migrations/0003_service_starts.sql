-- Instance starts are the store's now: createRetrysafe records each service instance's start in
-- retrysafe.service_starts (store migration 0029), and the Retrysafe server builds its demo
-- service with createRetrysafe, so its own starts are recorded there too; its table here goes.
-- Its rows (the overview's start markers of the last 35 days) are copied first, where the
-- store's table exists (the server's migrate applies the store's set before this one).
DO $$
BEGIN
  IF to_regclass('retrysafe.service_starts') IS NOT NULL AND to_regclass('retrysafe_server.instance_starts') IS NOT NULL THEN
    INSERT INTO retrysafe.service_starts (started_at, service, instance, package_version)
    SELECT started_at, service, left(instance, 300), left(package_version, 100) FROM retrysafe_server.instance_starts
    WHERE service ~ '^[a-z0-9][a-z0-9._-]{0,62}$'
    ORDER BY started_at;
  END IF;
END $$;
--> statement-breakpoint
DROP TABLE IF EXISTS "retrysafe_server"."instance_starts";
