-- The demo payments API's tables (schema retrysafe_demo), a migration set of the Retrysafe server
-- alone: `npm start` and `npm run cli -- migrate` apply it, `retrysafe migrate` (an adopting
-- service) never does. Until the store had a schema of its own they were created by the store's
-- migration 0001 in public; the store's 0017_own_schema moves such an install's tables here,
-- so every statement below is IF NOT EXISTS and finds them in place.
--
-- Indexes:
--   payments_principal_created_idx: a tenant's payments, newest first (demo API and dashboard).
--   refunds_payment_idx: the refunds of a payment, summed when a refund is created.
CREATE TABLE IF NOT EXISTS "tenants" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"name" text NOT NULL,
	"api_key_hash" "bytea" NOT NULL,
	"permissions" text[] DEFAULT ARRAY['payments:write', 'refunds:write']::text[] NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"revoked_at" timestamp with time zone,
	CONSTRAINT "tenants_api_key_hash_key" UNIQUE("api_key_hash"),
	CONSTRAINT "tenants_name_length" CHECK (char_length("tenants"."name") BETWEEN 1 AND 200)
);
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "payments" (
	"id" text PRIMARY KEY NOT NULL,
	"principal_id" uuid NOT NULL,
	"amount" bigint NOT NULL,
	"currency" text NOT NULL,
	"description" text,
	"status" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "payments_amount_positive" CHECK ("payments"."amount" > 0),
	CONSTRAINT "payments_currency" CHECK ("payments"."currency" ~ '^[A-Z]{3}$')
);
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "refunds" (
	"id" text PRIMARY KEY NOT NULL,
	"principal_id" uuid NOT NULL,
	"payment_id" text NOT NULL,
	"amount" bigint NOT NULL,
	"status" text NOT NULL,
	"processor_reference" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "refunds_amount_positive" CHECK ("refunds"."amount" > 0),
	CONSTRAINT "refunds_payment_id_payments_id_fk" FOREIGN KEY ("payment_id") REFERENCES "payments"("id") ON DELETE no action ON UPDATE no action
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "payments_principal_created_idx" ON "payments" USING btree ("principal_id","created_at");--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "refunds_payment_idx" ON "refunds" USING btree ("payment_id");
