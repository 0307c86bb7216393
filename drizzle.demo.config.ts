import { defineConfig } from 'drizzle-kit';

// The demo API's tables (schema retrysafe_demo): a migration set of the Retrysafe server alone,
// which db/migrate.ts applies after the store's. `npm run db:generate:demo`.
export default defineConfig({
  dialect: 'postgresql',
  schema: './db/schema/demo.ts',
  schemaFilter: ['retrysafe_demo'],
  out: './db/demo-migrations',
  strict: true,
  verbose: true,
});
