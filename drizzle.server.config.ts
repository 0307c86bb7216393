import { defineConfig } from 'drizzle-kit';

// The Retrysafe server's own tables (schema retrysafe_server: operators, sessions, the audit log, alert history): a
// migration set of the server alone, which db/migrate.ts applies after the store's and the demo's.
// `npm run db:generate:server`.
export default defineConfig({
  dialect: 'postgresql',
  schema: './db/schema/server.ts',
  schemaFilter: ['retrysafe_server'],
  out: './db/server-migrations',
  strict: true,
  verbose: true,
});
