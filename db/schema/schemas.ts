// The Postgres schemas Retrysafe's tables live in: the store's own (everything of the store, the
// dashboard's operators and audit included) and the demo API's, a migration set of its own.
import { pgSchema } from 'drizzle-orm/pg-core';

export const retrysafe = pgSchema('retrysafe');
export const retrysafeDemo = pgSchema('retrysafe_demo');
