-- Hand-written: Drizzle cannot express functions.
-- The dashboard's database role may not write the key store. Releasing one stale claim is the
-- one store write an operator needs, so it goes through this SECURITY DEFINER function, which
-- runs as the owner, touches only an in-progress row whose lease has passed, and writes the
-- audit row in the same transaction (the caller's). Primary key lookup (principal, scope, key).
CREATE FUNCTION retrysafe_release_stale_claim(p_principal_id uuid, p_scope text, p_key text, p_actor text, p_reason text)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = retrysafe, pg_temp AS $$
DECLARE
  released integer;
BEGIN
  IF p_reason IS NULL OR char_length(btrim(p_reason)) = 0 THEN
    RAISE EXCEPTION 'a reason is required' USING ERRCODE = 'check_violation';
  END IF;
  UPDATE idempotency_keys SET state = 'failed', lease_expires_at = NULL
  WHERE principal_id = p_principal_id AND scope = p_scope AND key = p_key
    AND state = 'in_progress' AND lease_expires_at < now();
  GET DIAGNOSTICS released = ROW_COUNT;
  IF released = 0 THEN
    RETURN false;
  END IF;
  INSERT INTO audit_log (actor, action, target, reason)
  VALUES (p_actor, 'stale_claim.release', jsonb_build_object('principalId', p_principal_id, 'scope', p_scope, 'key', p_key), p_reason);
  RETURN true;
END;
$$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_release_stale_claim(uuid, text, text, text, text) FROM PUBLIC;
