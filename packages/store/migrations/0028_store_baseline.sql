-- The store's schema as one migration (schema version 10): what migrations 0000-0027 left in
-- retrysafe, less what is the Retrysafe server's and not a service's (operators, their accounts,
-- sessions and verifications, the sign-in throttle, the audit log and the functions over them,
-- which the server's own migration set creates in retrysafe_server; so the release of a stale
-- claim here writes no audit row, as 0029 makes it everywhere). A fresh install applies this one
-- and the migrator records 0000-0027 as done with it; an install already on 0000-0027 applies
-- what it lacks of them and records this one without running it (packages/store/src/migrate.ts).
-- Hand-assembled from the catalog of a database migrated through 0027 (test/helpers/schema-catalog.ts),
-- and proven equal to it by test/integration/migrate-baseline.test.ts, both layouts.
-- The key table in the layout chosen at install (the migrator sets retrysafe.store_layout for
-- this session; plain unless STORE_LAYOUT=partitioned): partitioned by day of expiry, its primary
-- key then holding expires_at, the partition key. Day partitions are created at the end.
DO $$
BEGIN
  IF coalesce(current_setting('retrysafe.store_layout', true), '') = 'partitioned' THEN
    CREATE TABLE "retrysafe"."idempotency_keys" (
  "created_at" timestamp with time zone DEFAULT now() NOT NULL,
  "expires_at" timestamp with time zone NOT NULL,
  "lease_expires_at" timestamp with time zone,
  "completed_at" timestamp with time zone,
  "principal_id" uuid NOT NULL,
  "correlation_id" uuid NOT NULL,
  "response_size" integer,
  "response_status" smallint,
  "scope" text NOT NULL,
  "key" text NOT NULL,
  "state" text NOT NULL,
  "fingerprint" bytea NOT NULL,
  "response_content_type" text,
  "response_body" bytea,
  "response_key_id" text,
  "response_ref" text,
  "attempts" integer DEFAULT 1 NOT NULL,
  "service" text NOT NULL
) PARTITION BY RANGE (expires_at);
    ALTER TABLE "retrysafe"."idempotency_keys" ADD CONSTRAINT "idempotency_keys_pkey" PRIMARY KEY (principal_id, service, scope, key, expires_at);
  ELSE
    CREATE TABLE "retrysafe"."idempotency_keys" (
  "created_at" timestamp with time zone DEFAULT now() NOT NULL,
  "expires_at" timestamp with time zone NOT NULL,
  "lease_expires_at" timestamp with time zone,
  "completed_at" timestamp with time zone,
  "principal_id" uuid NOT NULL,
  "correlation_id" uuid NOT NULL,
  "response_size" integer,
  "response_status" smallint,
  "scope" text NOT NULL,
  "key" text NOT NULL,
  "state" text NOT NULL,
  "fingerprint" bytea NOT NULL,
  "response_content_type" text,
  "response_body" bytea,
  "response_key_id" text,
  "response_ref" text,
  "attempts" integer DEFAULT 1 NOT NULL,
  "service" text NOT NULL
);
    ALTER TABLE "retrysafe"."idempotency_keys" ADD CONSTRAINT "idempotency_keys_pkey" PRIMARY KEY (principal_id, service, scope, key);
  END IF;
END $$;
--> statement-breakpoint
CREATE TABLE "retrysafe"."claim_latency_hour" (
  "hour" timestamp with time zone NOT NULL,
  "scope" text NOT NULL,
  "bucket" smallint NOT NULL,
  "count" bigint NOT NULL,
  "service" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."claim_latency_minute" (
  "minute" timestamp with time zone NOT NULL,
  "scope" text NOT NULL,
  "bucket" smallint NOT NULL,
  "count" bigint NOT NULL,
  "service" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."claim_latency_series" (
  "step" integer NOT NULL,
  "service" text NOT NULL,
  "scope" text NOT NULL,
  "at" timestamp with time zone NOT NULL,
  "bucket" smallint NOT NULL,
  "count" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."endpoint_policies" (
  "endpoint" text NOT NULL,
  "scope_mode" text NOT NULL,
  "retry_window_seconds" integer NOT NULL,
  "retention_seconds" integer NOT NULL,
  "lease_ms" integer NOT NULL,
  "lock_timeout_ms" integer NOT NULL,
  "max_response_bytes" integer NOT NULL,
  "live_key_quota" integer NOT NULL,
  "version" integer DEFAULT 1 NOT NULL,
  "updated_at" timestamp with time zone DEFAULT now() NOT NULL,
  "updated_by" text NOT NULL,
  "service" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."endpoint_policy_declarations" (
  "service" text NOT NULL,
  "endpoint" text NOT NULL,
  "scope_mode" text NOT NULL,
  "retry_window_seconds" integer NOT NULL,
  "retention_seconds" integer NOT NULL,
  "lease_ms" integer NOT NULL,
  "lock_timeout_ms" integer NOT NULL,
  "max_response_bytes" integer NOT NULL,
  "live_key_quota" integer NOT NULL,
  "declared_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."endpoint_policy_history" (
  "id" bigserial NOT NULL,
  "endpoint" text NOT NULL,
  "version" integer NOT NULL,
  "changed_at" timestamp with time zone DEFAULT now() NOT NULL,
  "changed_by" text NOT NULL,
  "reason" text NOT NULL,
  "previous" jsonb,
  "current" jsonb NOT NULL,
  "breaking" boolean DEFAULT false NOT NULL,
  "acknowledged" boolean DEFAULT false NOT NULL,
  "service" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."flow_counts_hour" (
  "hour" timestamp with time zone NOT NULL,
  "scope" text NOT NULL,
  "outcome" text NOT NULL,
  "count" bigint NOT NULL,
  "service" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."flow_counts_minute" (
  "minute" timestamp with time zone NOT NULL,
  "scope" text NOT NULL,
  "outcome" text NOT NULL,
  "count" bigint NOT NULL,
  "service" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."flow_counts_series" (
  "step" integer NOT NULL,
  "service" text NOT NULL,
  "scope" text NOT NULL,
  "at" timestamp with time zone NOT NULL,
  "outcome" text NOT NULL,
  "count" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."idempotency_key_usage" (
  "bucket_start" timestamp with time zone NOT NULL,
  "principal_id" uuid NOT NULL,
  "instance_id" uuid NOT NULL,
  "claims" integer NOT NULL,
  "scope" text NOT NULL,
  "service" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."key_attempt_counts" (
  "last_at" timestamp with time zone NOT NULL,
  "expires_at" timestamp with time zone NOT NULL,
  "principal_id" uuid NOT NULL,
  "replays" integer DEFAULT 0 NOT NULL,
  "conflicts" integer DEFAULT 0 NOT NULL,
  "mismatches" integer DEFAULT 0 NOT NULL,
  "quota_refusals" integer DEFAULT 0 NOT NULL,
  "service" text NOT NULL,
  "scope" text NOT NULL,
  "key" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."key_attempts" (
  "at" timestamp with time zone NOT NULL,
  "expires_at" timestamp with time zone NOT NULL,
  "principal_id" uuid NOT NULL,
  "correlation_id" uuid NOT NULL,
  "status" smallint NOT NULL,
  "service" text NOT NULL,
  "scope" text NOT NULL,
  "key" text NOT NULL,
  "outcome" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."principal_flow_day" (
  "service" text NOT NULL,
  "scope" text NOT NULL,
  "day" timestamp with time zone NOT NULL,
  "outcome" text NOT NULL,
  "principal_id" uuid NOT NULL,
  "count" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."principal_flow_hour" (
  "service" text NOT NULL,
  "scope" text NOT NULL,
  "hour" timestamp with time zone NOT NULL,
  "outcome" text NOT NULL,
  "principal_id" uuid NOT NULL,
  "count" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."principal_flow_minute" (
  "service" text NOT NULL,
  "scope" text NOT NULL,
  "minute" timestamp with time zone NOT NULL,
  "outcome" text NOT NULL,
  "principal_id" uuid NOT NULL,
  "count" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."principal_names" (
  "principal_id" uuid NOT NULL,
  "name" text NOT NULL,
  "updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."reconcile_findings" (
  "principal_id" uuid NOT NULL,
  "service" text NOT NULL,
  "scope" text NOT NULL,
  "key" text NOT NULL,
  "kind" text NOT NULL,
  "effect" text NOT NULL,
  "correlation_id" text NOT NULL,
  "attempts" integer NOT NULL,
  "created_at" timestamp with time zone NOT NULL,
  "completed_at" timestamp with time zone,
  "lease_expired_at" timestamp with time zone,
  "expires_at" timestamp with time zone NOT NULL,
  "found_at" timestamp with time zone NOT NULL,
  "checked_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."reconcile_runs" (
  "service" text NOT NULL,
  "at" timestamp with time zone NOT NULL,
  "duration_ms" integer NOT NULL,
  "examined" integer NOT NULL,
  "effect_checks" integer NOT NULL,
  "effect_errors" integer NOT NULL,
  "unlisted" integer NOT NULL,
  "effect_errors_total" integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."store_stats" (
  "sampled_at" timestamp with time zone NOT NULL,
  "estimated_rows" bigint NOT NULL,
  "baseline_rows" bigint NOT NULL,
  "table_bytes" bigint NOT NULL,
  "index_bytes" bigint NOT NULL,
  "toast_bytes" bigint NOT NULL,
  "oldest_row_age_seconds" double precision,
  "cleanup_lag_seconds" double precision NOT NULL,
  "stale_claims" integer NOT NULL,
  "last_sweep_run_id" bigint
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."store_stats_scopes" (
  "sampled_at" timestamp with time zone NOT NULL,
  "scope" text NOT NULL,
  "estimated_rows" bigint NOT NULL,
  "response_bytes" bigint NOT NULL,
  "sampled_fraction" double precision NOT NULL,
  "service" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."sweep_run_scopes" (
  "run_id" bigint NOT NULL,
  "scope" text NOT NULL,
  "rows_deleted" bigint NOT NULL,
  "min_age_seconds" double precision NOT NULL,
  "retry_window_seconds" integer,
  "min_margin_seconds" double precision,
  "service" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."sweep_runs" (
  "id" bigserial NOT NULL,
  "started_at" timestamp with time zone DEFAULT now() NOT NULL,
  "finished_at" timestamp with time zone,
  "trigger" text NOT NULL,
  "status" text NOT NULL,
  "chunks" integer DEFAULT 0 NOT NULL,
  "rows_deleted" bigint DEFAULT 0 NOT NULL,
  "stale_released" integer DEFAULT 0 NOT NULL,
  "longest_chunk_ms" double precision DEFAULT 0 NOT NULL,
  "stop_reason" text,
  "error" text
);
--> statement-breakpoint
CREATE TABLE "retrysafe"."unrecorded_completions" (
  "at" timestamp with time zone NOT NULL,
  "expires_at" timestamp with time zone NOT NULL,
  "principal_id" uuid NOT NULL,
  "correlation_id" uuid NOT NULL,
  "service" text NOT NULL,
  "scope" text NOT NULL,
  "key" text NOT NULL,
  "error_class" text NOT NULL
);
--> statement-breakpoint
ALTER TABLE "retrysafe"."claim_latency_hour" ADD CONSTRAINT "claim_latency_hour_pkey" PRIMARY KEY (hour, service, scope, bucket);
--> statement-breakpoint
ALTER TABLE "retrysafe"."claim_latency_minute" ADD CONSTRAINT "claim_latency_minute_pkey" PRIMARY KEY (minute, service, scope, bucket);
--> statement-breakpoint
ALTER TABLE "retrysafe"."claim_latency_series" ADD CONSTRAINT "claim_latency_series_pkey" PRIMARY KEY (step, service, scope, at, bucket);
--> statement-breakpoint
ALTER TABLE "retrysafe"."claim_latency_series" ADD CONSTRAINT "claim_latency_series_step" CHECK ((step = ANY (ARRAY[60, 300, 900, 3600, 21600])));
--> statement-breakpoint
ALTER TABLE "retrysafe"."endpoint_policies" ADD CONSTRAINT "endpoint_policies_limits_positive" CHECK (((lease_ms > 0) AND (lock_timeout_ms > 0) AND (max_response_bytes > 0) AND (live_key_quota > 0)));
--> statement-breakpoint
ALTER TABLE "retrysafe"."endpoint_policies" ADD CONSTRAINT "endpoint_policies_pkey" PRIMARY KEY (service, endpoint);
--> statement-breakpoint
ALTER TABLE "retrysafe"."endpoint_policies" ADD CONSTRAINT "endpoint_policies_retention_covers_window" CHECK ((retention_seconds >= retry_window_seconds));
--> statement-breakpoint
ALTER TABLE "retrysafe"."endpoint_policies" ADD CONSTRAINT "endpoint_policies_scope_mode" CHECK ((scope_mode = ANY (ARRAY['endpoint'::text, 'intent'::text])));
--> statement-breakpoint
ALTER TABLE "retrysafe"."endpoint_policies" ADD CONSTRAINT "endpoint_policies_window_positive" CHECK ((retry_window_seconds > 0));
--> statement-breakpoint
ALTER TABLE "retrysafe"."endpoint_policy_declarations" ADD CONSTRAINT "endpoint_policy_declarations_pkey" PRIMARY KEY (service, endpoint);
--> statement-breakpoint
ALTER TABLE "retrysafe"."endpoint_policy_declarations" ADD CONSTRAINT "endpoint_policy_declarations_scope_mode" CHECK ((scope_mode = ANY (ARRAY['endpoint'::text, 'intent'::text])));
--> statement-breakpoint
ALTER TABLE "retrysafe"."endpoint_policy_history" ADD CONSTRAINT "endpoint_policy_history_breaking_acknowledged" CHECK (((NOT breaking) OR acknowledged));
--> statement-breakpoint
ALTER TABLE "retrysafe"."endpoint_policy_history" ADD CONSTRAINT "endpoint_policy_history_pkey" PRIMARY KEY (id);
--> statement-breakpoint
ALTER TABLE "retrysafe"."endpoint_policy_history" ADD CONSTRAINT "endpoint_policy_history_reason" CHECK (((char_length(reason) >= 1) AND (char_length(reason) <= 1000)));
--> statement-breakpoint
ALTER TABLE "retrysafe"."flow_counts_hour" ADD CONSTRAINT "flow_counts_hour_outcome" CHECK ((outcome = ANY (ARRAY['new'::text, 'replay'::text, 'conflict'::text, 'mismatch'::text, 'takeover'::text, 'rejected'::text, 'error'::text])));
--> statement-breakpoint
ALTER TABLE "retrysafe"."flow_counts_hour" ADD CONSTRAINT "flow_counts_hour_pkey" PRIMARY KEY (hour, service, scope, outcome);
--> statement-breakpoint
ALTER TABLE "retrysafe"."flow_counts_minute" ADD CONSTRAINT "flow_counts_minute_outcome" CHECK ((outcome = ANY (ARRAY['new'::text, 'replay'::text, 'conflict'::text, 'mismatch'::text, 'takeover'::text, 'rejected'::text, 'error'::text])));
--> statement-breakpoint
ALTER TABLE "retrysafe"."flow_counts_minute" ADD CONSTRAINT "flow_counts_minute_pkey" PRIMARY KEY (minute, service, scope, outcome);
--> statement-breakpoint
ALTER TABLE "retrysafe"."flow_counts_series" ADD CONSTRAINT "flow_counts_series_outcome" CHECK ((outcome = ANY (ARRAY['new'::text, 'replay'::text, 'conflict'::text, 'mismatch'::text, 'takeover'::text, 'rejected'::text, 'error'::text])));
--> statement-breakpoint
ALTER TABLE "retrysafe"."flow_counts_series" ADD CONSTRAINT "flow_counts_series_pkey" PRIMARY KEY (step, service, scope, at, outcome);
--> statement-breakpoint
ALTER TABLE "retrysafe"."flow_counts_series" ADD CONSTRAINT "flow_counts_series_step" CHECK ((step = ANY (ARRAY[60, 300, 900, 3600, 21600])));
--> statement-breakpoint
ALTER TABLE "retrysafe"."idempotency_key_usage" ADD CONSTRAINT "idempotency_key_usage_claims" CHECK ((claims >= 0));
--> statement-breakpoint
ALTER TABLE "retrysafe"."idempotency_key_usage" ADD CONSTRAINT "idempotency_key_usage_pkey" PRIMARY KEY (principal_id, service, scope, bucket_start, instance_id);
--> statement-breakpoint
ALTER TABLE "retrysafe"."idempotency_keys" ADD CONSTRAINT "idempotency_keys_body_has_key_id" CHECK (((response_body IS NULL) OR (response_key_id IS NOT NULL)));
--> statement-breakpoint
ALTER TABLE "retrysafe"."idempotency_keys" ADD CONSTRAINT "idempotency_keys_body_or_ref" CHECK (((response_body IS NULL) OR (response_ref IS NULL)));
--> statement-breakpoint
ALTER TABLE "retrysafe"."idempotency_keys" ADD CONSTRAINT "idempotency_keys_completed_has_response" CHECK (((state <> 'completed'::text) OR ((response_status IS NOT NULL) AND (completed_at IS NOT NULL) AND ((response_body IS NOT NULL) OR (response_ref IS NOT NULL)))));
--> statement-breakpoint
ALTER TABLE "retrysafe"."idempotency_keys" ADD CONSTRAINT "idempotency_keys_expiry_after_creation" CHECK ((expires_at > created_at));
--> statement-breakpoint
ALTER TABLE "retrysafe"."idempotency_keys" ADD CONSTRAINT "idempotency_keys_fingerprint_size" CHECK ((octet_length(fingerprint) = 32));
--> statement-breakpoint
ALTER TABLE "retrysafe"."idempotency_keys" ADD CONSTRAINT "idempotency_keys_in_progress_has_lease" CHECK (((state <> 'in_progress'::text) OR (lease_expires_at IS NOT NULL)));
--> statement-breakpoint
ALTER TABLE "retrysafe"."idempotency_keys" ADD CONSTRAINT "idempotency_keys_key_length" CHECK (((octet_length(key) >= 1) AND (octet_length(key) <= 255)));
--> statement-breakpoint
ALTER TABLE "retrysafe"."idempotency_keys" ADD CONSTRAINT "idempotency_keys_response_status" CHECK (((response_status IS NULL) OR ((response_status >= 100) AND (response_status <= 599))));
--> statement-breakpoint
ALTER TABLE "retrysafe"."idempotency_keys" ADD CONSTRAINT "idempotency_keys_scope_length" CHECK (((octet_length(scope) >= 1) AND (octet_length(scope) <= 200)));
--> statement-breakpoint
ALTER TABLE "retrysafe"."idempotency_keys" ADD CONSTRAINT "idempotency_keys_service_name" CHECK ((service ~ '^[a-z0-9][a-z0-9._-]{0,62}$'::text));
--> statement-breakpoint
ALTER TABLE "retrysafe"."idempotency_keys" ADD CONSTRAINT "idempotency_keys_state" CHECK ((state = ANY (ARRAY['in_progress'::text, 'completed'::text, 'failed'::text])));
--> statement-breakpoint
ALTER TABLE "retrysafe"."key_attempt_counts" ADD CONSTRAINT "key_attempt_counts_pkey" PRIMARY KEY (principal_id, service, scope, key);
--> statement-breakpoint
ALTER TABLE "retrysafe"."key_attempts" ADD CONSTRAINT "key_attempts_outcome" CHECK ((outcome = ANY (ARRAY['replay'::text, 'conflict'::text, 'mismatch'::text, 'rejected'::text])));
--> statement-breakpoint
ALTER TABLE "retrysafe"."key_attempts" ADD CONSTRAINT "key_attempts_pkey" PRIMARY KEY (principal_id, service, scope, key, at, correlation_id);
--> statement-breakpoint
ALTER TABLE "retrysafe"."key_attempts" ADD CONSTRAINT "key_attempts_status" CHECK (((status >= 100) AND (status <= 599)));
--> statement-breakpoint
ALTER TABLE "retrysafe"."principal_flow_day" ADD CONSTRAINT "principal_flow_day_outcome" CHECK ((outcome = ANY (ARRAY['conflict'::text, 'mismatch'::text, 'rejected'::text, 'takeover'::text, 'error'::text, 'claims'::text])));
--> statement-breakpoint
ALTER TABLE "retrysafe"."principal_flow_day" ADD CONSTRAINT "principal_flow_day_pkey" PRIMARY KEY (service, scope, day, outcome, principal_id);
--> statement-breakpoint
ALTER TABLE "retrysafe"."principal_flow_hour" ADD CONSTRAINT "principal_flow_hour_outcome" CHECK ((outcome = ANY (ARRAY['conflict'::text, 'mismatch'::text, 'rejected'::text, 'takeover'::text, 'error'::text, 'claims'::text])));
--> statement-breakpoint
ALTER TABLE "retrysafe"."principal_flow_hour" ADD CONSTRAINT "principal_flow_hour_pkey" PRIMARY KEY (service, scope, hour, outcome, principal_id);
--> statement-breakpoint
ALTER TABLE "retrysafe"."principal_flow_minute" ADD CONSTRAINT "principal_flow_minute_outcome" CHECK ((outcome = ANY (ARRAY['conflict'::text, 'mismatch'::text, 'rejected'::text, 'takeover'::text, 'error'::text, 'claims'::text])));
--> statement-breakpoint
ALTER TABLE "retrysafe"."principal_flow_minute" ADD CONSTRAINT "principal_flow_minute_pkey" PRIMARY KEY (service, scope, minute, outcome, principal_id);
--> statement-breakpoint
ALTER TABLE "retrysafe"."principal_names" ADD CONSTRAINT "principal_names_name_length" CHECK (((char_length(name) >= 1) AND (char_length(name) <= 200)));
--> statement-breakpoint
ALTER TABLE "retrysafe"."principal_names" ADD CONSTRAINT "principal_names_pkey" PRIMARY KEY (principal_id);
--> statement-breakpoint
ALTER TABLE "retrysafe"."reconcile_findings" ADD CONSTRAINT "reconcile_findings_effect" CHECK ((effect = ANY (ARRAY['present'::text, 'missing'::text, 'unknown'::text])));
--> statement-breakpoint
ALTER TABLE "retrysafe"."reconcile_findings" ADD CONSTRAINT "reconcile_findings_kind" CHECK ((kind = ANY (ARRAY['effect_missing'::text, 'stale_claim'::text])));
--> statement-breakpoint
ALTER TABLE "retrysafe"."reconcile_findings" ADD CONSTRAINT "reconcile_findings_pkey" PRIMARY KEY (principal_id, service, scope, key);
--> statement-breakpoint
ALTER TABLE "retrysafe"."reconcile_runs" ADD CONSTRAINT "reconcile_runs_pkey" PRIMARY KEY (service);
--> statement-breakpoint
ALTER TABLE "retrysafe"."store_stats" ADD CONSTRAINT "store_stats_pkey" PRIMARY KEY (sampled_at);
--> statement-breakpoint
ALTER TABLE "retrysafe"."store_stats_scopes" ADD CONSTRAINT "store_stats_scopes_pkey" PRIMARY KEY (sampled_at, service, scope);
--> statement-breakpoint
ALTER TABLE "retrysafe"."sweep_run_scopes" ADD CONSTRAINT "sweep_run_scopes_pkey" PRIMARY KEY (run_id, service, scope);
--> statement-breakpoint
ALTER TABLE "retrysafe"."sweep_runs" ADD CONSTRAINT "sweep_runs_pkey" PRIMARY KEY (id);
--> statement-breakpoint
ALTER TABLE "retrysafe"."unrecorded_completions" ADD CONSTRAINT "unrecorded_completions_pkey" PRIMARY KEY (principal_id, service, scope, key, correlation_id);
--> statement-breakpoint
ALTER TABLE "retrysafe"."sweep_run_scopes" ADD CONSTRAINT "sweep_run_scopes_run_id_sweep_runs_id_fk" FOREIGN KEY (run_id) REFERENCES retrysafe.sweep_runs(id) ON DELETE CASCADE;
--> statement-breakpoint
CREATE INDEX claim_latency_series_hours_at_idx ON retrysafe.claim_latency_series USING btree (at) WHERE ((step >= 3600) AND (bucket >= 0));
--> statement-breakpoint
CREATE INDEX claim_latency_series_minutes_at_idx ON retrysafe.claim_latency_series USING btree (at) WHERE ((step < 3600) AND (bucket >= 0));
--> statement-breakpoint
CREATE INDEX endpoint_policy_history_endpoint_idx ON retrysafe.endpoint_policy_history USING btree (service, endpoint, version);
--> statement-breakpoint
CREATE INDEX flow_counts_series_hours_at_idx ON retrysafe.flow_counts_series USING btree (at) WHERE ((step >= 3600) AND (outcome > ''::text));
--> statement-breakpoint
CREATE INDEX flow_counts_series_minutes_at_idx ON retrysafe.flow_counts_series USING btree (at) WHERE ((step < 3600) AND (outcome > ''::text));
--> statement-breakpoint
CREATE INDEX idempotency_keys_correlation_idx ON retrysafe.idempotency_keys USING btree (correlation_id) WHERE (correlation_id >= '00000000-0000-0000-0000-000000000000'::uuid);
--> statement-breakpoint
CREATE INDEX idempotency_keys_expiry_idx ON retrysafe.idempotency_keys USING btree (expires_at) WHERE (expires_at > '-infinity'::timestamp with time zone);
--> statement-breakpoint
CREATE INDEX idempotency_keys_principal_created_idx ON retrysafe.idempotency_keys USING btree (principal_id, created_at) WHERE (created_at > '-infinity'::timestamp with time zone);
--> statement-breakpoint
CREATE INDEX idempotency_keys_stale_lease_idx ON retrysafe.idempotency_keys USING btree (lease_expires_at) WHERE ((state = 'in_progress'::text) AND (lease_expires_at IS NOT NULL));
--> statement-breakpoint
CREATE INDEX key_attempt_counts_expiry_idx ON retrysafe.key_attempt_counts USING btree (expires_at);
--> statement-breakpoint
CREATE INDEX key_attempt_counts_troubled_idx ON retrysafe.key_attempt_counts USING btree (principal_id, ((conflicts + mismatches)) DESC) WHERE ((conflicts + mismatches) > 0);
--> statement-breakpoint
CREATE INDEX key_attempts_correlation_idx ON retrysafe.key_attempts USING btree (correlation_id);
--> statement-breakpoint
CREATE INDEX key_attempts_expiry_idx ON retrysafe.key_attempts USING btree (expires_at);
--> statement-breakpoint
CREATE INDEX principal_flow_day_day_idx ON retrysafe.principal_flow_day USING btree (day) WHERE (outcome > ''::text);
--> statement-breakpoint
CREATE INDEX principal_flow_hour_hour_idx ON retrysafe.principal_flow_hour USING btree (hour) WHERE (outcome > ''::text);
--> statement-breakpoint
CREATE INDEX principal_flow_minute_minute_idx ON retrysafe.principal_flow_minute USING btree (minute) WHERE (outcome > ''::text);
--> statement-breakpoint
CREATE INDEX principal_names_name_prefix_idx ON retrysafe.principal_names USING btree (lower(name) COLLATE "C");
--> statement-breakpoint
CREATE INDEX reconcile_findings_expiry_idx ON retrysafe.reconcile_findings USING btree (expires_at);
--> statement-breakpoint
CREATE INDEX reconcile_findings_service_idx ON retrysafe.reconcile_findings USING btree (service, checked_at);
--> statement-breakpoint
CREATE INDEX unrecorded_completions_at_idx ON retrysafe.unrecorded_completions USING btree (at, service);
--> statement-breakpoint
CREATE INDEX unrecorded_completions_expiry_idx ON retrysafe.unrecorded_completions USING btree (expires_at);
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe.retrysafe_claim_partitioned(p_principal uuid, p_service text, p_scope text, p_key text, p_fingerprint bytea, p_correlation uuid, p_lease_ms bigint, p_retention_ms bigint)
 RETURNS TABLE(claimed boolean, attempts integer, state text, fingerprint bytea, correlation_id uuid, expired boolean, lease_expired boolean, lease_remaining integer, response_status smallint, response_content_type text, response_body bytea, response_key_id text, response_ref text)
 LANGUAGE plpgsql
 SET search_path TO 'retrysafe', 'pg_temp'
AS $function$
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
END $function$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe.retrysafe_claim_partitioned(uuid,text,text,text,bytea,uuid,bigint,bigint) FROM PUBLIC;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe.retrysafe_ensure_partitions(extra_days integer DEFAULT 3)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'retrysafe', 'pg_temp'
AS $function$
DECLARE
  day timestamptz;
  horizon timestamptz;
  longest integer;
  name text;
  created integer := 0;
BEGIN
  IF extra_days IS NULL OR extra_days < 0 OR extra_days > 31 THEN
    RAISE EXCEPTION 'extra_days must be between 0 and 31, not %', extra_days USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF (SELECT relkind FROM pg_class WHERE oid = 'idempotency_keys'::regclass) <> 'p' THEN
    RETURN 0;
  END IF;
  longest := (SELECT coalesce(max(retention_seconds), 0) FROM endpoint_policies);
  IF longest > 400 * 86400 THEN
    RAISE EXCEPTION 'a retention of % s is longer than the 400 days partitions are created for', longest USING ERRCODE = 'invalid_parameter_value';
  END IF;
  horizon := now() + longest * interval '1 second' + extra_days * interval '1 day';
  FOR day IN SELECT generate_series(date_trunc('day', now(), 'UTC'), horizon, interval '1 day') LOOP
    name := 'idempotency_keys_p' || to_char(day AT TIME ZONE 'UTC', 'YYYYMMDD');
    IF to_regclass(name) IS NULL THEN
      EXECUTE format('CREATE TABLE %I PARTITION OF idempotency_keys FOR VALUES FROM (%L) TO (%L)',
                     name, day, day + interval '1 day');
      created := created + 1;
    END IF;
  END LOOP;
  RETURN created;
END $function$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe.retrysafe_ensure_partitions(integer) FROM PUBLIC;
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
REVOKE ALL ON FUNCTION retrysafe.retrysafe_release_stale_claim(uuid,text,text,text,text,text) FROM PUBLIC;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe.retrysafe_store_schema_version()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'retrysafe', 'pg_temp'
AS $function$SELECT 10$function$;
--> statement-breakpoint
-- The partitioned layout's day partitions, from today to beyond the longest retention (none: three days); 0 in the plain layout.
SELECT retrysafe.retrysafe_ensure_partitions();
