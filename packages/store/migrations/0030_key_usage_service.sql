-- Store schema version unchanged (11): an index, no statement of a service changes.
-- idempotency_key_usage_service_bucket_idx serves the Retrysafe dashboard's read of one service's
-- principals with quota counters in its retention window (principalsWithLiveKeys: the stale claims
-- of a service whose keys are in a Redis Cluster, read each minute), which scanned the table. The
-- counters table is small (principals x scopes x hour buckets x instances within the longest
-- retention); the build takes its SHARE lock for well under a second at a million counters, and
-- the quota's flush upserts wait for it.
CREATE INDEX "idempotency_key_usage_service_bucket_idx" ON "retrysafe"."idempotency_key_usage" USING btree ("service","bucket_start");