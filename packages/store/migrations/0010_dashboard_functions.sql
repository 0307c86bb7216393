-- Hand-written: Drizzle cannot express function attributes.
-- An admin changes a policy from the dashboard, whose role may not create tables; the change
-- must still create the day partitions a longer retention needs (partitioned layout). So
-- partition creation runs as the owner (SECURITY DEFINER, fixed search_path); it only ever
-- creates missing partitions. The dashboard role is granted EXECUTE with the other grants.
ALTER FUNCTION retrysafe_ensure_partitions(integer) SECURITY DEFINER SET search_path = retrysafe, pg_temp;
--> statement-breakpoint
REVOKE ALL ON FUNCTION retrysafe_ensure_partitions(integer) FROM PUBLIC;
--> statement-breakpoint
-- The partitioned claim returns stored responses: only the owner (the store) may call it.
REVOKE ALL ON FUNCTION retrysafe_claim_partitioned(uuid, text, text, bytea, uuid, bigint, bigint) FROM PUBLIC;
