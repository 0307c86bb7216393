-- Hand-written: Drizzle cannot express functions, their attributes or data rewrites.
-- The dashboard's role no longer writes operators, credentials or sessions, and reads neither a
-- password hash nor a session token from a table (db/dashboard-access.ts revokes the grants).
-- Every write goes through a SECURITY DEFINER function below (owner, fixed search_path) that
-- checks what it may do and audits in the caller's transaction:
--   * an admin action (create, role/disable, password reset) names its actor by the session
--     it acts from (the SHA-256 of the session token, which the dashboard cannot read back),
--     and the function checks that session is live and an enabled admin's; the audit row
--     names that admin, not a string the caller chose;
--   * creating an operator without a session is for the owner (CLI, first admin): a caller
--     that could not insert into operators itself is refused;
--   * sessions are stored by the SHA-256 of their token (the cookie's value never reaches the
--     database); one is created only for an enabled operator, with a bounded lifetime.
-- Password hashes still leave the database at sign-in and at a password change, one operator
-- at a time, through retrysafe_operator_credential: argon2id verification runs in Node.
--
-- Existing sessions stay valid: their tokens are replaced by their hashes in place.
UPDATE operator_sessions SET token = encode(sha256(convert_to(token, 'UTF8')), 'hex') WHERE token !~ '^[0-9a-f]{64}$';
--> statement-breakpoint
-- The operator behind a live session, or no row. Not granted: used by the functions below.
CREATE FUNCTION retrysafe_session_operator(p_token_hash text)
RETURNS TABLE (operator_id text, email text, role text, session_id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = retrysafe, pg_temp AS $$
  SELECT o.id, o.email, o.role, s.id
  FROM operator_sessions s JOIN operators o ON o.id = s.user_id
  WHERE s.token = p_token_hash AND s.expires_at > now() AND NOT o.banned
$$;
--> statement-breakpoint
-- The acting admin of an admin action, or an error (insufficient_privilege).
CREATE FUNCTION retrysafe_acting_admin(p_token_hash text) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = retrysafe, pg_temp AS $$
DECLARE
  actor text;
BEGIN
  SELECT email INTO actor FROM retrysafe_session_operator(p_token_hash) WHERE role = 'admin';
  IF actor IS NULL THEN
    RAISE EXCEPTION 'this needs a live session of an enabled admin' USING ERRCODE = 'RS403';
  END IF;
  RETURN actor;
END;
$$;
--> statement-breakpoint
CREATE FUNCTION retrysafe_session_create(
  p_id text, p_token_hash text, p_user_id text, p_expires_at timestamptz, p_ip_address text, p_user_agent text)
RETURNS TABLE (id text, expires_at timestamptz, created_at timestamptz, updated_at timestamptz, ip_address text, user_agent text, user_id text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = retrysafe, pg_temp AS $$
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
$$;
--> statement-breakpoint
-- Sessions by token hash (the unique index on token serves it).
CREATE FUNCTION retrysafe_session_find(p_token_hashes text[])
RETURNS TABLE (token_hash text, id text, expires_at timestamptz, created_at timestamptz, updated_at timestamptz, ip_address text, user_agent text, user_id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = retrysafe, pg_temp AS $$
  SELECT s.token, s.id, s.expires_at, s.created_at, s.updated_at, s.ip_address, s.user_agent, s.user_id
  FROM operator_sessions s WHERE s.token = ANY (p_token_hashes)
$$;
--> statement-breakpoint
-- Extends a live session (better-auth's rolling expiry), within the same bound as creation.
CREATE FUNCTION retrysafe_session_touch(p_token_hash text, p_expires_at timestamptz)
RETURNS TABLE (id text, expires_at timestamptz, created_at timestamptz, updated_at timestamptz, ip_address text, user_agent text, user_id text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = retrysafe, pg_temp AS $$
BEGIN
  IF p_expires_at > now() + interval '7 days' THEN
    RAISE EXCEPTION 'a session lasts at most 7 days' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN QUERY
    UPDATE operator_sessions s SET expires_at = p_expires_at, updated_at = now()
    WHERE s.token = p_token_hash AND s.expires_at > now()
    RETURNING s.id, s.expires_at, s.created_at, s.updated_at, s.ip_address, s.user_agent, s.user_id;
END;
$$;
--> statement-breakpoint
CREATE FUNCTION retrysafe_session_end(p_token_hash text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = retrysafe, pg_temp AS $$
DECLARE
  ended integer;
BEGIN
  DELETE FROM operator_sessions WHERE token = p_token_hash;
  GET DIAGNOSTICS ended = ROW_COUNT;
  RETURN ended;
END;
$$;
--> statement-breakpoint
-- An enabled operator's credential account with its argon2id hash, for verifying a password in
-- Node (sign-in, password change). One operator per call; a disabled one has none to check.
CREATE FUNCTION retrysafe_operator_credential(p_user_id text)
RETURNS TABLE (id text, account_id text, provider_id text, user_id text, password text, created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = retrysafe, pg_temp AS $$
  SELECT a.id, a.account_id, a.provider_id, a.user_id, a.password, a.created_at, a.updated_at
  FROM operator_accounts a JOIN operators o ON o.id = a.user_id
  WHERE a.user_id = p_user_id AND a.provider_id = 'credential' AND NOT o.banned
$$;
--> statement-breakpoint
-- A new operator with its credential, audited. From a dashboard admin (p_actor_token_hash), or
-- with no session from a caller that may insert operators itself (the owner: CLI, first admin).
CREATE FUNCTION retrysafe_operator_create(
  p_actor_token_hash text, p_system_actor text, p_id text, p_account_id text, p_name text, p_email text, p_role text, p_password_hash text)
RETURNS TABLE (created_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = retrysafe, pg_temp AS $$
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
$$;
--> statement-breakpoint
-- A role change and/or disabling or enabling, by an admin, audited with the reason. Disabling
-- ends the operator's sessions. The admins' rows are locked first, so two admins demoting each
-- other at once cannot leave none (RS409).
CREATE FUNCTION retrysafe_operator_change(p_actor_token_hash text, p_operator_id text, p_role text, p_disabled boolean, p_reason text)
RETURNS TABLE (id text, email text, name text, role text, banned boolean, created_at timestamptz, sessions_ended integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = retrysafe, pg_temp AS $$
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
$$;
--> statement-breakpoint
-- An admin sets another operator's password (not their own: that is the password change, which
-- asks for the current one); every session of that operator ends. Audited with the reason.
CREATE FUNCTION retrysafe_operator_reset_password(p_actor_token_hash text, p_operator_id text, p_password_hash text, p_reason text)
RETURNS TABLE (email text, sessions_ended integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = retrysafe, pg_temp AS $$
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
$$;
--> statement-breakpoint
-- An operator changes their own password from a live session (the app has checked the current
-- password against retrysafe_operator_credential); every other session of theirs ends. Audited.
CREATE FUNCTION retrysafe_operator_change_password(p_token_hash text, p_password_hash text)
RETURNS TABLE (operator_id text, email text, sessions_ended integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = retrysafe, pg_temp AS $$
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
$$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_session_operator(text) FROM PUBLIC;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_acting_admin(text) FROM PUBLIC;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_session_create(text, text, text, timestamptz, text, text) FROM PUBLIC;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_session_find(text[]) FROM PUBLIC;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_session_touch(text, timestamptz) FROM PUBLIC;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_session_end(text) FROM PUBLIC;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_operator_credential(text) FROM PUBLIC;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_operator_create(text, text, text, text, text, text, text, text) FROM PUBLIC;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_operator_change(text, text, text, boolean, text) FROM PUBLIC;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_operator_reset_password(text, text, text, text) FROM PUBLIC;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_operator_change_password(text, text) FROM PUBLIC;
--> statement-breakpoint
-- Partitions ahead are bounded: at most 31 extra days beyond the longest retention, and a
-- retention longer than the policies allow (400 days) is refused rather than followed, so no
-- caller (the dashboard's role included: it may change policies) can have thousands of tables
-- created. Same body otherwise (0004).
CREATE OR REPLACE FUNCTION retrysafe_ensure_partitions(extra_days integer DEFAULT 3) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = retrysafe, pg_temp AS $$
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
END $$;
