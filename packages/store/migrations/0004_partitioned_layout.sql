-- Hand-written: Drizzle cannot express partitioning or PL/pgSQL.
--
-- The day-partitioned layout of the key store, chosen at install time with
-- STORE_LAYOUT=partitioned (the migrator sets retrysafe.store_layout for this session).
-- Keys are partitioned by RANGE (expires_at), one partition per UTC day, so every row of a
-- partition whose upper bound has passed is past its expiry and the partition can be
-- dropped whole. Postgres cannot enforce UNIQUE (principal_id, scope, key) across
-- partitions, so in this layout the claim is one function call that takes a
-- transaction-scoped advisory lock on the scoped key, probes the partitions that can
-- hold a live row (expires_at > now(), pruned at execution), and inserts only if none
-- does. The lock is held until the claiming transaction ends, so a concurrent claim of
-- the same key waits, then sees the committed row: the same guarantee as the unique
-- index gives the plain layout. Without the setting (the default) nothing changes here.
DO $$
BEGIN
  IF coalesce(current_setting('retrysafe.store_layout', true), '') <> 'partitioned' THEN
    RETURN;
  END IF;
  IF EXISTS (SELECT 1 FROM idempotency_keys) THEN
    RAISE EXCEPTION 'STORE_LAYOUT=partitioned is chosen at install time: idempotency_keys is not empty';
  END IF;
  ALTER TABLE idempotency_keys RENAME TO idempotency_keys_plain;
  ALTER INDEX idempotency_keys_pkey RENAME TO idempotency_keys_plain_pkey;
  ALTER INDEX idempotency_keys_expires_at_idx RENAME TO idempotency_keys_plain_expires_at_idx;
  ALTER INDEX idempotency_keys_in_progress_lease_idx RENAME TO idempotency_keys_plain_in_progress_lease_idx;
  CREATE TABLE idempotency_keys (LIKE idempotency_keys_plain INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (expires_at);
  -- Unique per partition-key value only; the claim function provides the global rule.
  -- Serves the claim's probe of each live partition (prefix principal_id, scope, key).
  ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (principal_id, scope, key, expires_at);
  -- Oldest-row and cleanup-lag figures, as in the plain layout.
  CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);
  -- The stale-claim scan, as in the plain layout.
  CREATE INDEX idempotency_keys_in_progress_lease_idx ON idempotency_keys (lease_expires_at) WHERE state = 'in_progress';
  DROP TABLE idempotency_keys_plain;
END $$;
--> statement-breakpoint
-- Creates the missing day partitions from today to beyond the longest retention (plus
-- `extra_days`), named idempotency_keys_pYYYYMMDD by UTC day. A no-op in the plain layout.
-- Called by the migration, by every sweep, and after every policy change.
CREATE FUNCTION retrysafe_ensure_partitions(extra_days integer DEFAULT 3) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  day timestamptz;
  horizon timestamptz;
  name text;
  created integer := 0;
BEGIN
  IF (SELECT relkind FROM pg_class WHERE oid = 'idempotency_keys'::regclass) <> 'p' THEN
    RETURN 0;
  END IF;
  horizon := now() + (SELECT coalesce(max(retention_seconds), 0) FROM endpoint_policies) * interval '1 second'
             + extra_days * interval '1 day';
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
--> statement-breakpoint
-- The claim of the partitioned layout; returns the same columns as the plain layout's
-- claim statement. Advisory lock key: a 64-bit hash of the scoped key (a collision only
-- makes two keys wait for each other).
CREATE FUNCTION retrysafe_claim_partitioned(
  p_principal uuid, p_scope text, p_key text, p_fingerprint bytea, p_correlation uuid, p_lease_ms bigint, p_retention_ms bigint)
RETURNS TABLE (
  claimed boolean, attempts integer, state text, fingerprint bytea, correlation_id uuid, expired boolean,
  lease_expired boolean, lease_remaining integer, response_status smallint, response_content_type text,
  response_body bytea, response_key_id text, response_ref text)
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_principal::text || E'\n' || p_scope || E'\n' || p_key, 7301));
  RETURN QUERY
    SELECT false, k.attempts, k.state, k.fingerprint, k.correlation_id, false,
           coalesce(k.lease_expires_at <= now(), false),
           coalesce(ceil(greatest(extract(epoch FROM k.lease_expires_at - now()), 0)), 0)::int,
           k.response_status, k.response_content_type, k.response_body, k.response_key_id, k.response_ref
    FROM idempotency_keys k
    WHERE k.principal_id = p_principal AND k.scope = p_scope AND k.key = p_key AND k.expires_at > now()
    ORDER BY k.expires_at DESC
    LIMIT 1;
  IF FOUND THEN
    RETURN;
  END IF;
  INSERT INTO idempotency_keys (principal_id, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
  VALUES (p_principal, p_scope, p_key, 'in_progress', p_fingerprint, p_correlation,
          now() + p_lease_ms * interval '1 millisecond', now() + p_retention_ms * interval '1 millisecond');
  RETURN QUERY SELECT true, 1, NULL::text, NULL::bytea, NULL::uuid, NULL::boolean, NULL::boolean, NULL::integer,
    NULL::smallint, NULL::text, NULL::bytea, NULL::text, NULL::text;
END $$;
--> statement-breakpoint
SELECT retrysafe_ensure_partitions();
