// The Postgres schemas Retrysafe's tables live in: the store's own (keys, policies, flow metrics,
// quota, evidence, principal names, service starts: what @retrysafe/store migrates), the demo
// API's and the Retrysafe server's (operators, sessions, the sign-in throttle, the audit log, alert history),
// each a migration set of its own.
import { pgSchema } from 'drizzle-orm/pg-core';

export const retrysafe = pgSchema('retrysafe');
export const retrysafeDemo = pgSchema('retrysafe_demo');
export const retrysafeServer = pgSchema('retrysafe_server');
