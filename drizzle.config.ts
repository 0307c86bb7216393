import { defineConfig } from 'drizzle-kit';

// drizzle-kit generates the store's migrations (schema retrysafe) from its tables, into the
// package that ships them; it needs no database for that. The package's own migrator applies
// them (`npx retrysafe migrate`, `npm run cli -- migrate`, `npm start`), not drizzle-kit.
// The demo's tables are another set: drizzle.demo.config.ts.
export default defineConfig({
  dialect: 'postgresql',
  schema: './db/schema/store.ts',
  schemaFilter: ['retrysafe'],
  out: './packages/store/migrations',
  strict: true,
  verbose: true,
});
