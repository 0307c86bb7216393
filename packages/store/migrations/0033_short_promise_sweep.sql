-- Store schema version unchanged (11): in the partitioned layout the sweeper also deletes the keys
-- promised less than a partition's width (a day) within a sweep of their expiry, instead of leaving
-- them for their partition's drop (up to a day late). It walks the expiry index from where its last
-- walk ended: sweep_runs.swept_through records that point with each chunk (nullable, no rewrite),
-- and a partial index on the runs that walked serves "the latest one" at any number of runs. The
-- run table is small (a row a sweep); its index is built in a moment.
ALTER TABLE "retrysafe"."sweep_runs" ADD COLUMN "swept_through" timestamp with time zone;--> statement-breakpoint
CREATE INDEX "sweep_runs_swept_through_idx" ON "retrysafe"."sweep_runs" USING btree ("id") WHERE "retrysafe"."sweep_runs"."swept_through" IS NOT NULL;