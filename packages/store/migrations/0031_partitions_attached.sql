-- Store schema version unchanged (11): the partitioned layout's partitions are made without
-- blocking claims. retrysafe_ensure_partitions made each day partition with CREATE TABLE ...
-- PARTITION OF, which takes an ACCESS EXCLUSIVE lock on idempotency_keys: it waited for every
-- transaction holding the table (a transactional-mode claim holds it for its handler's whole
-- run), and every claim that came after queued behind it, so one slow handler stalled all claims
-- while the sweeper or a policy change made the next day's partition. It now makes the table
-- alone (LIKE idempotency_keys, with its defaults and CHECK constraints) and attaches it, which
-- takes a SHARE UPDATE EXCLUSIVE lock on idempotency_keys (compatible with the claims' ROW
-- EXCLUSIVE); the attach builds the new, empty partition's indexes from the parent's. Same name,
-- arguments, bounds and grants.
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
      EXECUTE format('CREATE TABLE %I (LIKE idempotency_keys INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name);
      EXECUTE format('ALTER TABLE idempotency_keys ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                     name, day, day + interval '1 day');
      created := created + 1;
    END IF;
  END LOOP;
  RETURN created;
END $function$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe.retrysafe_ensure_partitions(integer) FROM PUBLIC;
