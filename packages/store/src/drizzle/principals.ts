// Principals as the dashboard shows them: a display name per principal id, the same in every
// service (a principal is a tenant or an account, not a service's). The demo's tenants get
// theirs when created; a service built on @retrysafe/store names its own with
// retrysafe.namePrincipal(). A principal without a name is shown by its id.
import { sql } from 'drizzle-orm';
import { check, index, text, timestamp, uuid } from 'drizzle-orm/pg-core';
import { retrysafe } from './schema.js';

export const principalNames = retrysafe.table(
  'principal_names',
  {
    principalId: uuid('principal_id').primaryKey(),
    name: text('name').notNull(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    // Serves the name prefix search (server/metrics/principals.ts): a range of lower(name) in
    // byte order, so a prefix is one index range whatever the database's collation.
    index('principal_names_name_prefix_idx').on(sql`lower(${t.name}) COLLATE "C"`),
    check('principal_names_name_length', sql`char_length(${t.name}) BETWEEN 1 AND 200`),
  ],
);
