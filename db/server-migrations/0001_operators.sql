-- The dashboard's operators, their credential accounts, sessions and verifications, the sign-in
-- throttle and the SECURITY DEFINER functions over them (which the dashboard's role executes:
-- db/dashboard-access.ts) are the Retrysafe server's, not a service's: they live in
-- retrysafe_server, and @retrysafe/store's migrations no longer create them (its 0028 baseline).
-- An install whose store migrations 0008-0014 created them in retrysafe has them moved here:
-- ALTER ... SET SCHEMA keeps their rows, indexes, constraints and grants. A fresh install
-- creates them (IF NOT EXISTS: nothing to create after a move). The functions are then
-- (re)defined with this schema first on their search_path; audit_log, which they write, stays
-- the store's (retrysafe). CREATE OR REPLACE keeps a moved function's grants.
SET LOCAL search_path = retrysafe_server, retrysafe, pg_temp;
--> statement-breakpoint
DO $$
DECLARE
  name text;
  fn text;
BEGIN
  FOREACH name IN ARRAY ARRAY['operators', 'operator_accounts', 'operator_sessions', 'operator_verifications', 'sign_in_throttle'] LOOP
    IF to_regclass(format('retrysafe.%I', name)) IS NOT NULL THEN
      EXECUTE format('ALTER TABLE retrysafe.%I SET SCHEMA retrysafe_server', name);
    END IF;
  END LOOP;
  FOREACH fn IN ARRAY ARRAY[
    'retrysafe_acting_admin(text)',
    'retrysafe_audit_sign_in_attempt(text,text,jsonb,jsonb,text,integer)',
    'retrysafe_operator_change(text,text,text,boolean,text)',
    'retrysafe_operator_change_password(text,text)',
    'retrysafe_operator_create(text,text,text,text,text,text,text,text)',
    'retrysafe_operator_credential(text)',
    'retrysafe_operator_reset_password(text,text,text,text)',
    'retrysafe_session_create(text,text,text,timestamp with time zone,text,text)',
    'retrysafe_session_end(text)',
    'retrysafe_session_find(text[])',
    'retrysafe_session_operator(text)',
    'retrysafe_session_touch(text,timestamp with time zone)'
  ] LOOP
    IF to_regprocedure('retrysafe.' || fn) IS NOT NULL THEN
      EXECUTE format('ALTER FUNCTION %s SET SCHEMA retrysafe_server', to_regprocedure('retrysafe.' || fn));
    END IF;
  END LOOP;
END $$;
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "retrysafe_server"."operators" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"email" text NOT NULL,
	"email_verified" boolean DEFAULT false NOT NULL,
	"image" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"role" text DEFAULT 'viewer' NOT NULL,
	"banned" boolean DEFAULT false NOT NULL,
	"ban_reason" text,
	"ban_expires" timestamp with time zone,
	CONSTRAINT "operators_email_key" UNIQUE("email"),
	CONSTRAINT "operators_role" CHECK ("retrysafe_server"."operators"."role" IN ('viewer', 'operator', 'compliance', 'admin'))
);
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "retrysafe_server"."operator_accounts" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"provider_id" text NOT NULL,
	"user_id" text NOT NULL,
	"access_token" text,
	"refresh_token" text,
	"id_token" text,
	"access_token_expires_at" timestamp with time zone,
	"refresh_token_expires_at" timestamp with time zone,
	"scope" text,
	"password" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "operator_accounts_user_id_operators_id_fk" FOREIGN KEY ("user_id") REFERENCES "retrysafe_server"."operators"("id") ON DELETE cascade ON UPDATE no action
);
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "retrysafe_server"."operator_sessions" (
	"id" text PRIMARY KEY NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"token" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"ip_address" text,
	"user_agent" text,
	"user_id" text NOT NULL,
	"impersonated_by" text,
	CONSTRAINT "operator_sessions_token_key" UNIQUE("token"),
	CONSTRAINT "operator_sessions_user_id_operators_id_fk" FOREIGN KEY ("user_id") REFERENCES "retrysafe_server"."operators"("id") ON DELETE cascade ON UPDATE no action
);
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "retrysafe_server"."operator_verifications" (
	"id" text PRIMARY KEY NOT NULL,
	"identifier" text NOT NULL,
	"value" text NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "retrysafe_server"."sign_in_throttle" (
	"subject" text PRIMARY KEY NOT NULL,
	"failures" integer NOT NULL,
	"window_started_at" timestamp with time zone NOT NULL,
	"locked_until" timestamp with time zone
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "operator_accounts_user_id_idx" ON "retrysafe_server"."operator_accounts" USING btree ("user_id");
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "operator_sessions_user_id_idx" ON "retrysafe_server"."operator_sessions" USING btree ("user_id");
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "operator_verifications_identifier_idx" ON "retrysafe_server"."operator_verifications" USING btree ("identifier");
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe_server.retrysafe_session_operator(p_token_hash text)
 RETURNS TABLE(operator_id text, email text, role text, session_id text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'retrysafe_server', 'retrysafe', 'pg_temp'
AS $function$
  SELECT o.id, o.email, o.role, s.id
  FROM operator_sessions s JOIN operators o ON o.id = s.user_id
  WHERE s.token = p_token_hash AND s.expires_at > now() AND NOT o.banned
$function$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_server.retrysafe_session_operator(text) FROM PUBLIC;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe_server.retrysafe_acting_admin(p_token_hash text)
 RETURNS text
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'retrysafe_server', 'retrysafe', 'pg_temp'
AS $function$
DECLARE
  actor text;
BEGIN
  SELECT email INTO actor FROM retrysafe_session_operator(p_token_hash) WHERE role = 'admin';
  IF actor IS NULL THEN
    RAISE EXCEPTION 'this needs a live session of an enabled admin' USING ERRCODE = 'RS403';
  END IF;
  RETURN actor;
END;
$function$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_server.retrysafe_acting_admin(text) FROM PUBLIC;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe_server.retrysafe_audit_sign_in_attempt(p_action text, p_actor text, p_target jsonb, p_details jsonb, p_address text, p_window_seconds integer)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'retrysafe_server', 'retrysafe', 'pg_temp'
AS $function$
DECLARE
  window_start timestamptz := date_bin(make_interval(secs => p_window_seconds), now(), timestamptz 'epoch');
  written bigint;
BEGIN
  IF p_action NOT IN ('auth.sign_in_failed', 'auth.sign_in_refused') THEN
    RAISE EXCEPTION 'only failed or refused sign-ins are aggregated, not %', p_action USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF p_window_seconds IS NULL OR p_window_seconds < 1 THEN
    RAISE EXCEPTION 'the window must be at least one second' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  INSERT INTO audit_log AS a (actor, action, target, details, aggregate_key, last_at)
  VALUES (p_actor, p_action, p_target, p_details,
          concat_ws('|', p_action, p_actor, coalesce(p_address, '-'), extract(epoch FROM window_start)::bigint), now())
  ON CONFLICT (aggregate_key) WHERE aggregate_key IS NOT NULL
  DO UPDATE SET occurrences = a.occurrences + 1, last_at = greatest(now(), a.last_at)
  RETURNING a.occurrences INTO written;
  RETURN written;
END;
$function$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_server.retrysafe_audit_sign_in_attempt(text,text,jsonb,jsonb,text,integer) FROM PUBLIC;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe_server.retrysafe_operator_change(p_actor_token_hash text, p_operator_id text, p_role text, p_disabled boolean, p_reason text)
 RETURNS TABLE(id text, email text, name text, role text, banned boolean, created_at timestamp with time zone, sessions_ended integer)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'retrysafe_server', 'retrysafe', 'pg_temp'
AS $function$
DECLARE
  actor text;
  was operators%ROWTYPE;
  now_row operators%ROWTYPE;
  ended integer := 0;
BEGIN
  IF p_reason IS NULL OR char_length(btrim(p_reason)) = 0 THEN
    RAISE EXCEPTION 'a reason is required' USING ERRCODE = 'check_violation';
  END IF;
  PERFORM 1 FROM operators o WHERE o.role = 'admin' ORDER BY o.id FOR UPDATE;
  -- After the lock: an admin demoted a moment ago by another admin acts no more.
  actor := retrysafe_acting_admin(p_actor_token_hash);
  SELECT * INTO was FROM operators o WHERE o.id = p_operator_id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'no such operator' USING ERRCODE = 'RS404';
  END IF;
  UPDATE operators o SET role = coalesce(p_role, o.role), banned = coalesce(p_disabled, o.banned),
    ban_reason = CASE WHEN p_disabled THEN p_reason WHEN p_disabled = false THEN NULL ELSE o.ban_reason END, updated_at = now()
  WHERE o.id = p_operator_id RETURNING * INTO now_row;
  IF was.role = 'admin' AND NOT was.banned AND (now_row.role <> 'admin' OR now_row.banned)
     AND NOT EXISTS (SELECT 1 FROM operators o WHERE o.role = 'admin' AND NOT o.banned) THEN
    RAISE EXCEPTION 'This is the last enabled admin: make another admin first' USING ERRCODE = 'RS409';
  END IF;
  IF now_row.banned THEN
    DELETE FROM operator_sessions s WHERE s.user_id = p_operator_id;
    GET DIAGNOSTICS ended = ROW_COUNT;
  END IF;
  INSERT INTO audit_log (actor, action, target, reason, details)
  VALUES (actor,
          CASE WHEN p_disabled THEN 'operator.disable' WHEN p_disabled = false THEN 'operator.enable' ELSE 'operator.role' END,
          jsonb_build_object('operatorId', p_operator_id, 'email', now_row.email), p_reason,
          jsonb_build_object('role', jsonb_build_object('from', was.role, 'to', now_row.role),
                             'disabled', jsonb_build_object('from', was.banned, 'to', now_row.banned), 'sessionsEnded', ended));
  RETURN QUERY SELECT now_row.id, now_row.email, now_row.name, now_row.role, now_row.banned, now_row.created_at, ended;
END;
$function$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_server.retrysafe_operator_change(text,text,text,boolean,text) FROM PUBLIC;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe_server.retrysafe_operator_change_password(p_token_hash text, p_password_hash text)
 RETURNS TABLE(operator_id text, email text, sessions_ended integer)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'retrysafe_server', 'retrysafe', 'pg_temp'
AS $function$
DECLARE
  me record;
  ended integer;
BEGIN
  SELECT * INTO me FROM retrysafe_session_operator(p_token_hash);
  IF me.operator_id IS NULL THEN
    RAISE EXCEPTION 'this needs a live session' USING ERRCODE = 'RS403';
  END IF;
  IF p_password_hash NOT LIKE '$argon2id$%' THEN
    RAISE EXCEPTION 'a password is stored as an argon2id hash' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  UPDATE operator_accounts a SET password = p_password_hash, updated_at = now() WHERE a.user_id = me.operator_id AND a.provider_id = 'credential';
  IF NOT FOUND THEN
    RAISE EXCEPTION 'this operator has no password to change' USING ERRCODE = 'RS404';
  END IF;
  DELETE FROM operator_sessions s WHERE s.user_id = me.operator_id AND s.token <> p_token_hash;
  GET DIAGNOSTICS ended = ROW_COUNT;
  INSERT INTO audit_log (actor, action, target, details)
  VALUES (me.email, 'operator.password_change', jsonb_build_object('operatorId', me.operator_id, 'email', me.email),
          jsonb_build_object('otherSessionsEnded', ended));
  RETURN QUERY SELECT me.operator_id, me.email, ended;
END;
$function$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_server.retrysafe_operator_change_password(text,text) FROM PUBLIC;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe_server.retrysafe_operator_create(p_actor_token_hash text, p_system_actor text, p_id text, p_account_id text, p_name text, p_email text, p_role text, p_password_hash text)
 RETURNS TABLE(created_at timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'retrysafe_server', 'retrysafe', 'pg_temp'
AS $function$
DECLARE
  actor text;
  created timestamptz;
BEGIN
  IF p_actor_token_hash IS NULL THEN
    IF NOT has_table_privilege(session_user, 'operators', 'INSERT') OR p_system_actor IS NULL THEN
      RAISE EXCEPTION 'creating an operator needs an admin session' USING ERRCODE = 'RS403';
    END IF;
    actor := p_system_actor;
  ELSE
    actor := retrysafe_acting_admin(p_actor_token_hash);
  END IF;
  IF p_password_hash NOT LIKE '$argon2id$%' THEN
    RAISE EXCEPTION 'a password is stored as an argon2id hash' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  INSERT INTO operators AS o (id, name, email, role) VALUES (p_id, p_name, p_email, p_role) RETURNING o.created_at INTO created;
  INSERT INTO operator_accounts (id, account_id, provider_id, user_id, password) VALUES (p_account_id, p_id, 'credential', p_id, p_password_hash);
  INSERT INTO audit_log (actor, action, target, details)
  VALUES (actor, 'operator.create', jsonb_build_object('operatorId', p_id, 'email', p_email), jsonb_build_object('role', p_role));
  RETURN QUERY SELECT created;
END;
$function$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_server.retrysafe_operator_create(text,text,text,text,text,text,text,text) FROM PUBLIC;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe_server.retrysafe_operator_credential(p_user_id text)
 RETURNS TABLE(id text, account_id text, provider_id text, user_id text, password text, created_at timestamp with time zone, updated_at timestamp with time zone)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'retrysafe_server', 'retrysafe', 'pg_temp'
AS $function$
  SELECT a.id, a.account_id, a.provider_id, a.user_id, a.password, a.created_at, a.updated_at
  FROM operator_accounts a JOIN operators o ON o.id = a.user_id
  WHERE a.user_id = p_user_id AND a.provider_id = 'credential' AND NOT o.banned
$function$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_server.retrysafe_operator_credential(text) FROM PUBLIC;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe_server.retrysafe_operator_reset_password(p_actor_token_hash text, p_operator_id text, p_password_hash text, p_reason text)
 RETURNS TABLE(email text, sessions_ended integer)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'retrysafe_server', 'retrysafe', 'pg_temp'
AS $function$
DECLARE
  actor_id text;
  actor text;
  target_email text;
  ended integer;
BEGIN
  SELECT s.operator_id, s.email INTO actor_id, actor FROM retrysafe_session_operator(p_actor_token_hash) s WHERE s.role = 'admin';
  IF actor IS NULL THEN
    RAISE EXCEPTION 'this needs a live session of an enabled admin' USING ERRCODE = 'RS403';
  END IF;
  IF p_operator_id = actor_id THEN
    RAISE EXCEPTION 'Change your own password on the account page, with your current one' USING ERRCODE = 'RS422';
  END IF;
  IF p_reason IS NULL OR char_length(btrim(p_reason)) = 0 THEN
    RAISE EXCEPTION 'a reason is required' USING ERRCODE = 'check_violation';
  END IF;
  IF p_password_hash NOT LIKE '$argon2id$%' THEN
    RAISE EXCEPTION 'a password is stored as an argon2id hash' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT o.email INTO target_email FROM operators o WHERE o.id = p_operator_id FOR UPDATE;
  IF target_email IS NULL THEN
    RAISE EXCEPTION 'no such operator' USING ERRCODE = 'RS404';
  END IF;
  UPDATE operator_accounts a SET password = p_password_hash, updated_at = now() WHERE a.user_id = p_operator_id AND a.provider_id = 'credential';
  IF NOT FOUND THEN
    INSERT INTO operator_accounts (id, account_id, provider_id, user_id, password)
    VALUES (replace(gen_random_uuid()::text, '-', ''), p_operator_id, 'credential', p_operator_id, p_password_hash);
  END IF;
  DELETE FROM operator_sessions s WHERE s.user_id = p_operator_id;
  GET DIAGNOSTICS ended = ROW_COUNT;
  INSERT INTO audit_log (actor, action, target, reason, details)
  VALUES (actor, 'operator.password_reset', jsonb_build_object('operatorId', p_operator_id, 'email', target_email), p_reason,
          jsonb_build_object('sessionsEnded', ended));
  RETURN QUERY SELECT target_email, ended;
END;
$function$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_server.retrysafe_operator_reset_password(text,text,text,text) FROM PUBLIC;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe_server.retrysafe_session_create(p_id text, p_token_hash text, p_user_id text, p_expires_at timestamp with time zone, p_ip_address text, p_user_agent text)
 RETURNS TABLE(id text, expires_at timestamp with time zone, created_at timestamp with time zone, updated_at timestamp with time zone, ip_address text, user_agent text, user_id text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'retrysafe_server', 'retrysafe', 'pg_temp'
AS $function$
BEGIN
  IF p_token_hash !~ '^[0-9a-f]{64}$' THEN
    RAISE EXCEPTION 'a session is stored by the SHA-256 of its token' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_expires_at > now() + interval '7 days' THEN
    RAISE EXCEPTION 'a session lasts at most 7 days' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM operators o WHERE o.id = p_user_id AND NOT o.banned) THEN
    RAISE EXCEPTION 'no enabled operator with this id' USING ERRCODE = 'RS403';
  END IF;
  RETURN QUERY
    INSERT INTO operator_sessions AS s (id, token, user_id, expires_at, ip_address, user_agent)
    VALUES (p_id, p_token_hash, p_user_id, p_expires_at, left(p_ip_address, 100), left(p_user_agent, 500))
    RETURNING s.id, s.expires_at, s.created_at, s.updated_at, s.ip_address, s.user_agent, s.user_id;
END;
$function$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_server.retrysafe_session_create(text,text,text,timestamp with time zone,text,text) FROM PUBLIC;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe_server.retrysafe_session_end(p_token_hash text)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'retrysafe_server', 'retrysafe', 'pg_temp'
AS $function$
DECLARE
  ended integer;
BEGIN
  DELETE FROM operator_sessions WHERE token = p_token_hash;
  GET DIAGNOSTICS ended = ROW_COUNT;
  RETURN ended;
END;
$function$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_server.retrysafe_session_end(text) FROM PUBLIC;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe_server.retrysafe_session_find(p_token_hashes text[])
 RETURNS TABLE(token_hash text, id text, expires_at timestamp with time zone, created_at timestamp with time zone, updated_at timestamp with time zone, ip_address text, user_agent text, user_id text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'retrysafe_server', 'retrysafe', 'pg_temp'
AS $function$
  SELECT s.token, s.id, s.expires_at, s.created_at, s.updated_at, s.ip_address, s.user_agent, s.user_id
  FROM operator_sessions s WHERE s.token = ANY (p_token_hashes)
$function$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_server.retrysafe_session_find(text[]) FROM PUBLIC;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION retrysafe_server.retrysafe_session_touch(p_token_hash text, p_expires_at timestamp with time zone)
 RETURNS TABLE(id text, expires_at timestamp with time zone, created_at timestamp with time zone, updated_at timestamp with time zone, ip_address text, user_agent text, user_id text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'retrysafe_server', 'retrysafe', 'pg_temp'
AS $function$
BEGIN
  IF p_expires_at > now() + interval '7 days' THEN
    RAISE EXCEPTION 'a session lasts at most 7 days' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN QUERY
    UPDATE operator_sessions s SET expires_at = p_expires_at, updated_at = now()
    WHERE s.token = p_token_hash AND s.expires_at > now()
    RETURNING s.id, s.expires_at, s.created_at, s.updated_at, s.ip_address, s.user_agent, s.user_id;
END;
$function$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_server.retrysafe_session_touch(text,timestamp with time zone) FROM PUBLIC;
