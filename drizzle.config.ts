import { defineConfig } from 'drizzle-kit';

// drizzle-kit generates migrations from the schema; it needs no database for that.
// `npm run cli -- migrate` applies them (under an advisory lock), not drizzle-kit.
export default defineConfig({
  dialect: 'postgresql',
  schema: './db/schema/index.ts',
  out: './db/migrations',
  strict: true,
  verbose: true,
});
