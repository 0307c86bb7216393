#!/usr/bin/env node
// `npx retrysafe migrate`: applies the store's migrations (schema retrysafe) to the database at
// DATABASE_URL, so an adopting service's deployment can migrate without the Retrysafe server.
// STORE_LAYOUT=partitioned chooses the partitioned key table on a database's first migration.
import { migrate, STORE_MIGRATIONS_FOLDER } from './migrate.js';

const USAGE = 'Usage: retrysafe migrate   (DATABASE_URL: the database, as a role that may create schema retrysafe; STORE_LAYOUT: plain | partitioned)';

async function main(args: string[]): Promise<number> {
  const [command, ...rest] = args;
  if (command !== 'migrate' || rest.length > 0) {
    process.stderr.write(`${USAGE}\n`);
    return command === undefined || command === 'help' || command === '--help' ? 0 : 2;
  }
  const url = process.env.DATABASE_URL;
  if (!url) {
    process.stderr.write(`DATABASE_URL is not set\n${USAGE}\n`);
    return 2;
  }
  const layout = process.env.STORE_LAYOUT ?? 'plain';
  if (layout !== 'plain' && layout !== 'partitioned') {
    process.stderr.write(`STORE_LAYOUT must be plain or partitioned, not ${layout}\n`);
    return 2;
  }
  const result = await migrate(url, { layout });
  process.stdout.write(`${JSON.stringify({ applied: result.applied, current: result.current, folder: STORE_MIGRATIONS_FOLDER })}\n`);
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`retrysafe migrate failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  },
);
