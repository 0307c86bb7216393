// The Postgres schemas of the Retrysafe server's own tables: the demo API's and the server's
// (operators, sessions, the sign-in throttle, the audit log, alert history), each a migration set
// of its own. The store's schema, retrysafe, is @retrysafe/store's (`@retrysafe/store/drizzle`).
import { pgSchema } from 'drizzle-orm/pg-core';

export const retrysafeDemo = pgSchema('retrysafe_demo');
export const retrysafeServer = pgSchema('retrysafe_server');
