-- Store schema version 11. Two changes a service's statements see, so one version:
-- service_starts: each start of a service's instance on @retrysafe/store (createRetrysafe writes
-- one row at start: the service, host:pid and the package version), for the dashboard's overview;
-- its started index serves the overview's events in a window and the Retrysafe server's delete
-- of the oldest (its alert-history duty; a service alone writes a row a start and prunes none).
-- retrysafe_release_stale_claim no longer writes an audit row: the audit log is the Retrysafe
-- server's (its migration 0002 moves retrysafe.audit_log to retrysafe_server, or creates it
-- there), and the server audits a release through its own function, in the same transaction.
-- Same signature (p_actor is no longer used), so grants and callers are kept. An older package
-- would still write retrysafe.audit_log when it creates a policy, which a database made by this
-- one does not have: version 11 refuses it at start.
CREATE TABLE "retrysafe"."service_starts" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "retrysafe"."service_starts_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"started_at" timestamp with time zone DEFAULT now() NOT NULL,
	"service" text NOT NULL,
	"instance" text NOT NULL,
	"package_version" text NOT NULL,
	CONSTRAINT "service_starts_service_name" CHECK ("retrysafe"."service_starts"."service" ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
	CONSTRAINT "service_starts_lengths" CHECK (char_length("retrysafe"."service_starts"."instance") <= 300 AND char_length("retrysafe"."service_starts"."package_version") <= 100)
);
--> statement-breakpoint
CREATE INDEX "service_starts_started_idx" ON "retrysafe"."service_starts" USING btree ("started_at");
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe.retrysafe_release_stale_claim(p_principal_id uuid, p_service text, p_scope text, p_key text, p_actor text, p_reason text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'retrysafe', 'pg_temp'
AS $function$
DECLARE
  released integer;
BEGIN
  IF p_reason IS NULL OR char_length(btrim(p_reason)) = 0 THEN
    RAISE EXCEPTION 'a reason is required' USING ERRCODE = 'check_violation';
  END IF;
  UPDATE idempotency_keys SET state = 'failed', lease_expires_at = NULL
  WHERE principal_id = p_principal_id AND service = p_service AND scope = p_scope AND key = p_key
    AND state = 'in_progress' AND coalesce(lease_expires_at < now(), false);
  GET DIAGNOSTICS released = ROW_COUNT;
  RETURN released > 0;
END;
$function$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe.retrysafe_store_schema_version()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'retrysafe', 'pg_temp'
AS $function$SELECT 11$function$;
