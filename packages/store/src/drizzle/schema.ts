// The Postgres schema the store's tables live in (keys, policies, flow metrics, quota, evidence,
// principal names, service starts: what the package's migrations create).
import { pgSchema } from 'drizzle-orm/pg-core';

/** The store's Postgres schema, `retrysafe`: every table of `@retrysafe/store/drizzle` is in it. */
export const retrysafe = pgSchema('retrysafe');
