// The demo payments API's own tables: tenants (principals) with hashed API keys,
// payments and refunds. They live in the same database as the key store, so the
// payments endpoint can share one transaction between claim and effect.
import { sql } from 'drizzle-orm';
import { bigint, check, index, text, timestamp, uuid } from 'drizzle-orm/pg-core';
import { retrysafeDemo } from './schemas';
import { bytea } from './types';

export const tenants = retrysafeDemo.table(
  'tenants',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    name: text('name').notNull(),
    // SHA-256 of the API key; the key itself is shown once, at creation.
    apiKeyHash: bytea('api_key_hash').notNull().unique('tenants_api_key_hash_key'),
    // Endpoint permissions, checked on every request (also before a replay).
    permissions: text('permissions').array().notNull().default(sql`ARRAY['payments:write', 'refunds:write']::text[]`),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    revokedAt: timestamp('revoked_at', { withTimezone: true }),
  },
  (t) => [check('tenants_name_length', sql`char_length(${t.name}) BETWEEN 1 AND 200`)],
);

export const payments = retrysafeDemo.table(
  'payments',
  {
    id: text('id').primaryKey(),
    principalId: uuid('principal_id').notNull(),
    amount: bigint('amount', { mode: 'number' }).notNull(),
    currency: text('currency').notNull(),
    description: text('description'),
    status: text('status').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    index('payments_principal_created_idx').on(t.principalId, t.createdAt),
    check('payments_amount_positive', sql`${t.amount} > 0`),
    check('payments_currency', sql`${t.currency} ~ '^[A-Z]{3}$'`),
  ],
);

export const refunds = retrysafeDemo.table(
  'refunds',
  {
    id: text('id').primaryKey(),
    principalId: uuid('principal_id').notNull(),
    paymentId: text('payment_id')
      .notNull()
      .references(() => payments.id),
    amount: bigint('amount', { mode: 'number' }).notNull(),
    status: text('status').notNull(),
    processorReference: text('processor_reference').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('refunds_payment_idx').on(t.paymentId), check('refunds_amount_positive', sql`${t.amount} > 0`)],
);

/**
 * Incidents staged for practice (`npm run cli -- demo incident KIND --minutes N`): the running
 * server's traffic generator polls the active ones (until > now()) and plays each with its own
 * tenant (principal_id) until it ends.
 */
export const demoIncidents = retrysafeDemo.table(
  'demo_incidents',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    kind: text('kind').notNull(),
    principalId: uuid('principal_id').notNull(),
    startsAt: timestamp('starts_at', { withTimezone: true }).notNull().defaultNow(),
    until: timestamp('until', { withTimezone: true }).notNull(),
  },
  (t) => [
    // The generator's poll: the incidents not yet over.
    index('demo_incidents_until_idx').on(t.until),
    check('demo_incidents_kind', sql`${t.kind} IN ('noisy-tenant', 'key-reuse', 'slow-claims')`),
    check('demo_incidents_span', sql`${t.until} > ${t.startsAt}`),
  ],
);
