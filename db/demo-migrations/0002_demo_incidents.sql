-- Incidents staged for practice (npm run cli -- demo incident); demo_incidents_until_idx serves the
-- traffic generator's poll of the incidents not yet over (until > now()).
CREATE TABLE "retrysafe_demo"."demo_incidents" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"kind" text NOT NULL,
	"principal_id" uuid NOT NULL,
	"starts_at" timestamp with time zone DEFAULT now() NOT NULL,
	"until" timestamp with time zone NOT NULL,
	CONSTRAINT "demo_incidents_kind" CHECK ("retrysafe_demo"."demo_incidents"."kind" IN ('noisy-tenant', 'key-reuse', 'slow-claims')),
	CONSTRAINT "demo_incidents_span" CHECK ("retrysafe_demo"."demo_incidents"."until" > "retrysafe_demo"."demo_incidents"."starts_at")
);
--> statement-breakpoint
CREATE INDEX "demo_incidents_until_idx" ON "retrysafe_demo"."demo_incidents" USING btree ("until");