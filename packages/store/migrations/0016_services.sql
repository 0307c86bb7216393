-- Hand-written (drizzle-kit's generated version cannot add a NOT NULL column to a non-empty
-- table, nor name the primary keys it replaces).
--
-- Services: every key, policy, quota counter, flow bucket, per-scope sample and piece of sweep
-- evidence carries the service that owns it (createRetrysafe's `service`), so two services
-- sharing this database, their principal ids and their endpoint strings never share a key,
-- and the dashboard can tell their traffic apart. Rows from before services existed belong
-- to the demo service, `demo` (the name this repository's demo API runs under).
--
-- ADD COLUMN ... DEFAULT is instant (the default is kept in the catalog, not written into
-- every row); the default is then dropped, so nothing can be stored without naming its
-- service. Each primary key is rebuilt with the service after the principal (the key table)
-- or after the time bucket (the metric tables). On the key table that rebuild blocks writes
-- while it runs: minutes on tens of millions of rows (see README, Set-up, upgrading).
ALTER TABLE "idempotency_keys" ADD COLUMN "service" text NOT NULL DEFAULT 'demo';--> statement-breakpoint
ALTER TABLE "idempotency_keys" ALTER COLUMN "service" DROP DEFAULT;--> statement-breakpoint
ALTER TABLE "idempotency_keys" ADD CONSTRAINT "idempotency_keys_service_name" CHECK ("service" ~ '^[a-z0-9][a-z0-9._-]{0,62}$');--> statement-breakpoint
-- Serves every request-path statement (claim, read, take-over, complete, fail) and the
-- partitioned claim function's probe. In the partitioned layout the key includes expires_at,
-- the partition key, as before.
DO $$
BEGIN
  IF (SELECT relkind FROM pg_class WHERE oid = 'idempotency_keys'::regclass) = 'p' THEN
    ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey;
    ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (principal_id, service, scope, key, expires_at);
  ELSE
    ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey;
    ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (principal_id, service, scope, key);
  END IF;
END $$;--> statement-breakpoint
ALTER TABLE "idempotency_key_usage" ADD COLUMN "service" text NOT NULL DEFAULT 'demo';--> statement-breakpoint
ALTER TABLE "idempotency_key_usage" ALTER COLUMN "service" DROP DEFAULT;--> statement-breakpoint
ALTER TABLE "idempotency_key_usage" DROP CONSTRAINT "idempotency_key_usage_pkey";--> statement-breakpoint
-- Serves the quota flush's upsert and the per-principal totals (prefix principal_id, service, scope).
ALTER TABLE "idempotency_key_usage" ADD CONSTRAINT "idempotency_key_usage_pkey" PRIMARY KEY("principal_id","service","scope","bucket_start","instance_id");--> statement-breakpoint
ALTER TABLE "endpoint_policies" ADD COLUMN "service" text NOT NULL DEFAULT 'demo';--> statement-breakpoint
ALTER TABLE "endpoint_policies" ALTER COLUMN "service" DROP DEFAULT;--> statement-breakpoint
ALTER TABLE "endpoint_policies" DROP CONSTRAINT "endpoint_policies_pkey";--> statement-breakpoint
-- A policy is a service's endpoint's: serves the policy registry's read and every change.
ALTER TABLE "endpoint_policies" ADD CONSTRAINT "endpoint_policies_pkey" PRIMARY KEY("service","endpoint");--> statement-breakpoint
ALTER TABLE "endpoint_policy_history" ADD COLUMN "service" text NOT NULL DEFAULT 'demo';--> statement-breakpoint
ALTER TABLE "endpoint_policy_history" ALTER COLUMN "service" DROP DEFAULT;--> statement-breakpoint
DROP INDEX "endpoint_policy_history_endpoint_idx";--> statement-breakpoint
-- Serves one service endpoint's history, in order.
CREATE INDEX "endpoint_policy_history_endpoint_idx" ON "endpoint_policy_history" USING btree ("service","endpoint","version");--> statement-breakpoint
ALTER TABLE "sweep_run_scopes" ADD COLUMN "service" text NOT NULL DEFAULT 'demo';--> statement-breakpoint
ALTER TABLE "sweep_run_scopes" ALTER COLUMN "service" DROP DEFAULT;--> statement-breakpoint
ALTER TABLE "sweep_run_scopes" DROP CONSTRAINT "sweep_run_scopes_pkey";--> statement-breakpoint
ALTER TABLE "sweep_run_scopes" ADD CONSTRAINT "sweep_run_scopes_pkey" PRIMARY KEY("run_id","service","scope");--> statement-breakpoint
ALTER TABLE "flow_counts_minute" ADD COLUMN "service" text NOT NULL DEFAULT 'demo';--> statement-breakpoint
ALTER TABLE "flow_counts_minute" ALTER COLUMN "service" DROP DEFAULT;--> statement-breakpoint
ALTER TABLE "flow_counts_minute" DROP CONSTRAINT "flow_counts_minute_pkey";--> statement-breakpoint
-- Serves the flush upsert and every time-range read (prefix minute).
ALTER TABLE "flow_counts_minute" ADD CONSTRAINT "flow_counts_minute_pkey" PRIMARY KEY("minute","service","scope","outcome");--> statement-breakpoint
ALTER TABLE "flow_counts_hour" ADD COLUMN "service" text NOT NULL DEFAULT 'demo';--> statement-breakpoint
ALTER TABLE "flow_counts_hour" ALTER COLUMN "service" DROP DEFAULT;--> statement-breakpoint
ALTER TABLE "flow_counts_hour" DROP CONSTRAINT "flow_counts_hour_pkey";--> statement-breakpoint
ALTER TABLE "flow_counts_hour" ADD CONSTRAINT "flow_counts_hour_pkey" PRIMARY KEY("hour","service","scope","outcome");--> statement-breakpoint
ALTER TABLE "claim_latency_minute" ADD COLUMN "service" text NOT NULL DEFAULT 'demo';--> statement-breakpoint
ALTER TABLE "claim_latency_minute" ALTER COLUMN "service" DROP DEFAULT;--> statement-breakpoint
ALTER TABLE "claim_latency_minute" DROP CONSTRAINT "claim_latency_minute_pkey";--> statement-breakpoint
ALTER TABLE "claim_latency_minute" ADD CONSTRAINT "claim_latency_minute_pkey" PRIMARY KEY("minute","service","scope","bucket");--> statement-breakpoint
ALTER TABLE "claim_latency_hour" ADD COLUMN "service" text NOT NULL DEFAULT 'demo';--> statement-breakpoint
ALTER TABLE "claim_latency_hour" ALTER COLUMN "service" DROP DEFAULT;--> statement-breakpoint
ALTER TABLE "claim_latency_hour" DROP CONSTRAINT "claim_latency_hour_pkey";--> statement-breakpoint
ALTER TABLE "claim_latency_hour" ADD CONSTRAINT "claim_latency_hour_pkey" PRIMARY KEY("hour","service","scope","bucket");--> statement-breakpoint
ALTER TABLE "store_stats_scopes" ADD COLUMN "service" text NOT NULL DEFAULT 'demo';--> statement-breakpoint
ALTER TABLE "store_stats_scopes" ALTER COLUMN "service" DROP DEFAULT;--> statement-breakpoint
ALTER TABLE "store_stats_scopes" DROP CONSTRAINT "store_stats_scopes_pkey";--> statement-breakpoint
ALTER TABLE "store_stats_scopes" ADD CONSTRAINT "store_stats_scopes_pkey" PRIMARY KEY("sampled_at","service","scope");--> statement-breakpoint
-- The partitioned layout's claim: the advisory lock and the probe now name the service too.
DROP FUNCTION IF EXISTS retrysafe_claim_partitioned(uuid, text, text, bytea, uuid, bigint, bigint);--> statement-breakpoint
CREATE FUNCTION retrysafe_claim_partitioned(
  p_principal uuid, p_service text, p_scope text, p_key text, p_fingerprint bytea, p_correlation uuid, p_lease_ms bigint, p_retention_ms bigint)
RETURNS TABLE (
  claimed boolean, attempts integer, state text, fingerprint bytea, correlation_id uuid, expired boolean,
  lease_expired boolean, lease_remaining integer, response_status smallint, response_content_type text,
  response_body bytea, response_key_id text, response_ref text)
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_principal::text || E'\n' || p_service || E'\n' || p_scope || E'\n' || p_key, 7301));
  RETURN QUERY
    SELECT false, k.attempts, k.state, k.fingerprint, k.correlation_id, false,
           coalesce(k.lease_expires_at <= now(), false),
           coalesce(ceil(greatest(extract(epoch FROM k.lease_expires_at - now()), 0)), 0)::int,
           k.response_status, k.response_content_type, k.response_body, k.response_key_id, k.response_ref
    FROM idempotency_keys k
    WHERE k.principal_id = p_principal AND k.service = p_service AND k.scope = p_scope AND k.key = p_key AND k.expires_at > now()
    ORDER BY k.expires_at DESC
    LIMIT 1;
  IF FOUND THEN
    RETURN;
  END IF;
  INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
  VALUES (p_principal, p_service, p_scope, p_key, 'in_progress', p_fingerprint, p_correlation,
          now() + p_lease_ms * interval '1 millisecond', now() + p_retention_ms * interval '1 millisecond');
  RETURN QUERY SELECT true, 1, NULL::text, NULL::bytea, NULL::uuid, NULL::boolean, NULL::boolean, NULL::integer,
    NULL::smallint, NULL::text, NULL::bytea, NULL::text, NULL::text;
END $$;--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_claim_partitioned(uuid, text, text, text, bytea, uuid, bigint, bigint) FROM PUBLIC;--> statement-breakpoint
-- The operator's release of one stale claim, by the full primary key (as in 0012).
DROP FUNCTION IF EXISTS retrysafe_release_stale_claim(uuid, text, text, text, text);--> statement-breakpoint
CREATE FUNCTION retrysafe_release_stale_claim(p_principal_id uuid, p_service text, p_scope text, p_key text, p_actor text, p_reason text)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER AS $$
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
  IF released = 0 THEN
    RETURN false;
  END IF;
  INSERT INTO audit_log (actor, action, target, reason)
  VALUES (p_actor, 'stale_claim.release',
          jsonb_build_object('principalId', p_principal_id, 'service', p_service, 'scope', p_scope, 'key', p_key), p_reason);
  RETURN true;
END;
$$;--> statement-breakpoint
-- A SECURITY DEFINER function resolves names only in the schema that holds the key table (and
-- pg_temp last), wherever the migrations put it.
DO $$
BEGIN
  EXECUTE format('ALTER FUNCTION retrysafe_release_stale_claim(uuid, text, text, text, text, text) SET search_path = %I, pg_temp',
                 (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = 'idempotency_keys'::regclass));
END $$;--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_release_stale_claim(uuid, text, text, text, text, text) FROM PUBLIC;--> statement-breakpoint
-- The request path now names the service: a package older than this refuses to start here.
CREATE OR REPLACE FUNCTION retrysafe_store_schema_version() RETURNS integer
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS 'SELECT 2';
