-- The audit log is the Retrysafe server's: only the dashboard's actions (operators, sign-ins,
-- policy changes, key lookups, releases of stale claims) are audited, and @retrysafe/store no
-- longer creates or writes it (its 0028 baseline, and 0029 for the release of a stale claim).
-- An install whose store migrations 0002-0013 created it in retrysafe has it moved here with its
-- sequence, indexes, constraints, triggers and grants (ALTER ... SET SCHEMA: rows kept, instant);
-- a fresh install creates it. The append-only trigger's function moves (or is created) beside it.
-- The functions of migration 0001 write it by their search_path (this schema first), unchanged.
-- retrysafe_release_stale_claim_audited: an operator's release of a stale claim and its audit row
-- in one transaction (a function call is one), as SECURITY DEFINER, which the dashboard's role
-- executes (db/dashboard-access.ts); the release itself is the store's function.
DO $$
BEGIN
  IF to_regclass('retrysafe.audit_log') IS NOT NULL AND to_regclass('retrysafe_server.audit_log') IS NULL THEN
    ALTER TABLE retrysafe.audit_log SET SCHEMA retrysafe_server;
  END IF;
  IF to_regprocedure('retrysafe.audit_log_refuse_change()') IS NOT NULL AND to_regprocedure('retrysafe_server.audit_log_refuse_change()') IS NULL THEN
    ALTER FUNCTION retrysafe.audit_log_refuse_change() SET SCHEMA retrysafe_server;
  END IF;
  IF to_regclass('retrysafe_server.audit_log') IS NULL THEN
    CREATE TABLE "retrysafe_server"."audit_log" (
      "id" bigserial NOT NULL,
      "at" timestamp with time zone DEFAULT now() NOT NULL,
      "actor" text NOT NULL,
      "action" text NOT NULL,
      "target" jsonb NOT NULL,
      "reason" text,
      "details" jsonb,
      "occurrences" integer DEFAULT 1 NOT NULL,
      "last_at" timestamp with time zone,
      "aggregate_key" text,
      CONSTRAINT "audit_log_pkey" PRIMARY KEY ("id"),
      CONSTRAINT "audit_log_action" CHECK (char_length("action") BETWEEN 1 AND 100),
      CONSTRAINT "audit_log_occurrences" CHECK ("occurrences" >= 1)
    );
    -- The audit page's filters: by time, by actor, by action (each newest first).
    CREATE INDEX "audit_log_at_idx" ON "retrysafe_server"."audit_log" USING btree ("at");
    CREATE INDEX "audit_log_actor_at_idx" ON "retrysafe_server"."audit_log" USING btree ("actor", "at");
    CREATE INDEX "audit_log_action_at_idx" ON "retrysafe_server"."audit_log" USING btree ("action", "at");
    -- The sign-in aggregation's upsert (ON CONFLICT): one row per key.
    CREATE UNIQUE INDEX "audit_log_aggregate_key_idx" ON "retrysafe_server"."audit_log" USING btree ("aggregate_key") WHERE ("aggregate_key" IS NOT NULL);
  END IF;
END $$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe_server.audit_log_refuse_change()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'retrysafe_server', 'retrysafe', 'pg_temp'
AS $function$
BEGIN
  IF TG_OP = 'UPDATE' AND OLD.aggregate_key IS NOT NULL
     AND NEW.aggregate_key = OLD.aggregate_key
     AND NEW.id = OLD.id AND NEW.at = OLD.at AND NEW.actor = OLD.actor AND NEW.action = OLD.action
     AND NEW.target = OLD.target AND NEW.reason IS NOT DISTINCT FROM OLD.reason
     AND NEW.details IS NOT DISTINCT FROM OLD.details
     AND NEW.occurrences > OLD.occurrences
     AND NEW.last_at IS NOT NULL AND NEW.last_at >= coalesce(OLD.last_at, OLD.at) THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'audit_log is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$function$;
--> statement-breakpoint
-- Append-only for every role, the owner included (a moved table has them already: replaced alike).
CREATE OR REPLACE TRIGGER audit_log_append_only BEFORE DELETE OR UPDATE ON retrysafe_server.audit_log FOR EACH ROW EXECUTE FUNCTION retrysafe_server.audit_log_refuse_change();
--> statement-breakpoint
CREATE OR REPLACE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON retrysafe_server.audit_log FOR EACH STATEMENT EXECUTE FUNCTION retrysafe_server.audit_log_refuse_change();
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe_server.retrysafe_release_stale_claim_audited(p_principal_id uuid, p_service text, p_scope text, p_key text, p_actor text, p_reason text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'retrysafe_server', 'retrysafe', 'pg_temp'
AS $function$
BEGIN
  -- The store's release: a primary key lookup; refuses a blank reason (check_violation).
  IF NOT retrysafe.retrysafe_release_stale_claim(p_principal_id, p_service, p_scope, p_key, p_actor, p_reason) THEN
    RETURN false;
  END IF;
  INSERT INTO audit_log (actor, action, target, reason)
  VALUES (p_actor, 'stale_claim.release',
          jsonb_build_object('principalId', p_principal_id, 'service', p_service, 'scope', p_scope, 'key', p_key), p_reason);
  RETURN true;
END;
$function$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_server.retrysafe_release_stale_claim_audited(uuid,text,text,text,text,text) FROM PUBLIC;
