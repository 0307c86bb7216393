-- Store schema version unchanged (11): the sweeper's evidence per run and scope gains the longest
-- a deleted row had been past its expiry (how late the cleanup came: about a sweep interval in the
-- plain layout, up to a partition's width in the partitioned one), beside the youngest deleted
-- row's age (never inside its window). Null for runs recorded before it. A nullable column: no
-- rewrite, no wait beyond a moment's lock.
ALTER TABLE "retrysafe"."sweep_run_scopes" ADD COLUMN "max_past_expiry_seconds" double precision;
