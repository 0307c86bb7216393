import { defineConfig } from 'drizzle-kit';

// drizzle-kit generates the store's migrations (schema retrysafe) from the package's own tables
// (packages/store/src/drizzle, the `@retrysafe/store/drizzle` entry), into the package that
// ships them; it needs no database for that. The package's own migrator applies them
// (`npx retrysafe migrate`, `npm run cli -- migrate`, `npm start`), not drizzle-kit.
// The demo's tables are another set: drizzle.demo.config.ts.
export default defineConfig({
  dialect: 'postgresql',
  schema: './packages/store/src/drizzle/index.ts',
  schemaFilter: ['retrysafe'],
  out: './packages/store/migrations',
  strict: true,
  verbose: true,
});
