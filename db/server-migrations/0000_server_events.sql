-- The Retrysafe server's own tables (schema retrysafe_server), a migration set of the server alone:
-- `npm start` and `npm run cli -- migrate` apply it, `retrysafe migrate` (an adopting service)
-- never does. The migrator creates the schema before this runs (its journal lives there).
-- alert_history: each firing of an alert and its end, written once by the alert-history duty
-- (the open-firing unique index makes two evaluators at once insert it once); the started and
-- ended indexes serve the overview's events in a window and the retention's delete.
-- instance_starts: each start of a server instance with its @retrysafe/store version; its
-- started index serves the overview's events in a window and the retention's delete.
CREATE SCHEMA IF NOT EXISTS "retrysafe_server";
--> statement-breakpoint
CREATE TABLE "retrysafe_server"."alert_history" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "retrysafe_server"."alert_history_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"check" text NOT NULL,
	"service" text DEFAULT '' NOT NULL,
	"scope" text DEFAULT '' NOT NULL,
	"store_wide" boolean NOT NULL,
	"severity" text NOT NULL,
	"summary" text NOT NULL,
	"started_at" timestamp with time zone NOT NULL,
	"ended_at" timestamp with time zone,
	CONSTRAINT "alert_history_firing_key" UNIQUE("check","service","scope","started_at"),
	CONSTRAINT "alert_history_severity" CHECK ("retrysafe_server"."alert_history"."severity" IN ('warning', 'critical')),
	CONSTRAINT "alert_history_span" CHECK ("retrysafe_server"."alert_history"."ended_at" IS NULL OR "retrysafe_server"."alert_history"."ended_at" >= "retrysafe_server"."alert_history"."started_at")
);
--> statement-breakpoint
CREATE TABLE "retrysafe_server"."instance_starts" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "retrysafe_server"."instance_starts_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"started_at" timestamp with time zone DEFAULT now() NOT NULL,
	"service" text NOT NULL,
	"instance" text NOT NULL,
	"package_version" text NOT NULL,
	CONSTRAINT "instance_starts_lengths" CHECK (char_length("retrysafe_server"."instance_starts"."service") <= 200 AND char_length("retrysafe_server"."instance_starts"."instance") <= 300 AND char_length("retrysafe_server"."instance_starts"."package_version") <= 100)
);
--> statement-breakpoint
CREATE UNIQUE INDEX "alert_history_open_key" ON "retrysafe_server"."alert_history" USING btree ("check","service","scope") WHERE "retrysafe_server"."alert_history"."ended_at" IS NULL;--> statement-breakpoint
CREATE INDEX "alert_history_started_idx" ON "retrysafe_server"."alert_history" USING btree ("started_at");--> statement-breakpoint
CREATE INDEX "alert_history_ended_idx" ON "retrysafe_server"."alert_history" USING btree ("ended_at");--> statement-breakpoint
CREATE INDEX "instance_starts_started_idx" ON "retrysafe_server"."instance_starts" USING btree ("started_at");