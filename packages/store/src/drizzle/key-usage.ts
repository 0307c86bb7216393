// Live-key quota counters: claims per (principal, service, scope, hour bucket, instance). Each
// instance adds its own counts in one batched upsert every second, so no row is written
// by two instances and no request waits on a shared counter.
import { sql } from 'drizzle-orm';
import { check, index, integer, primaryKey, text, timestamp, uuid } from 'drizzle-orm/pg-core';
import { retrysafe } from './schema.js';

export const idempotencyKeyUsage = retrysafe.table(
  'idempotency_key_usage',
  {
    bucketStart: timestamp('bucket_start', { withTimezone: true }).notNull(),
    principalId: uuid('principal_id').notNull(),
    instanceId: uuid('instance_id').notNull(),
    claims: integer('claims').notNull(),
    service: text('service').notNull(),
    scope: text('scope').notNull(),
  },
  (t) => [
    // Serves the flush upsert and the per-principal totals (principal_id, service, scope prefix).
    primaryKey({ name: 'idempotency_key_usage_pkey', columns: [t.principalId, t.service, t.scope, t.bucketStart, t.instanceId] }),
    check('idempotency_key_usage_claims', sql`${t.claims} >= 0`),
    // Serves the dashboard's principals of one service with counters in its retention window
    // (principalsWithLiveKeys: the stale claims of a service kept in a Redis Cluster).
    index('idempotency_key_usage_service_bucket_idx').on(t.service, t.bucketStart),
  ],
);
