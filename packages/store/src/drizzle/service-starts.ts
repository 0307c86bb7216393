// Each start of a service's instance on @retrysafe/store (the Retrysafe server's own included: it
// builds its demo service with createRetrysafe), with the package version it runs: written by
// createRetrysafe at start (packages/store/src/service-starts.ts), read by the overview's events,
// pruned by the Retrysafe server's alert-history duty. Store migration 0029.
import { sql } from 'drizzle-orm';
import { bigint, check, index, text, timestamp } from 'drizzle-orm/pg-core';
import { retrysafe } from './schema.js';

export const serviceStarts = retrysafe.table(
  'service_starts',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    startedAt: timestamp('started_at', { withTimezone: true }).notNull().defaultNow(),
    service: text('service').notNull(),
    // host:pid, so two instances starting at once are told apart.
    instance: text('instance').notNull(),
    packageVersion: text('package_version').notNull(),
  },
  (t) => [
    // Serves the overview's starts in a window (a range, newest first) and the retention's delete.
    index('service_starts_started_idx').on(t.startedAt),
    check('service_starts_service_name', sql`${t.service} ~ '^[a-z0-9][a-z0-9._-]{0,62}$'`),
    check('service_starts_lengths', sql`char_length(${t.instance}) <= 300 AND char_length(${t.packageVersion}) <= 100`),
  ],
);
