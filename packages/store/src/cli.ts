#!/usr/bin/env node
// `npx retrysafe migrate`: applies the store's migrations (schema retrysafe) to the database at
// DATABASE_URL, so an adopting service's deployment can migrate without the Retrysafe server.
// STORE_LAYOUT=partitioned chooses the partitioned key table on a database's first migration.
// `npx retrysafe migrate --mysql <uri>` applies the MySQL/MariaDB backend's key table instead
// (mysql-migrations/, in the URI's database; mysql2 installed beside the package).
import { migrate, SessionRequiredError, STORE_MIGRATIONS_FOLDER, TRANSACTION_POOLER_REFUSAL } from './migrate.js';

const USAGE = 'Usage: retrysafe migrate   (DATABASE_URL: the database, as a role that may create schema retrysafe; STORE_LAYOUT: plain | partitioned)\n       retrysafe migrate --mysql <mysql://user:password@host:port/database>   (the MySQL/MariaDB key table)';

async function main(args: string[]): Promise<number> {
  const [command, ...rest] = args;
  if (command === 'migrate' && rest[0] === '--mysql') {
    const uri = rest[1];
    if (!uri || rest.length > 2 || !/^mysql:\/\//.test(uri)) {
      process.stderr.write(`--mysql needs one mysql:// URI\n${USAGE}\n`);
      return 2;
    }
    // Loaded only for this command: mysql2 is an optional peer dependency.
    const { migrateMysql, MYSQL_MIGRATIONS_FOLDER } = await import('./mysql-migrate.js');
    const result = await migrateMysql(uri);
    process.stdout.write(`${JSON.stringify({ applied: result.applied, current: result.current, folder: MYSQL_MIGRATIONS_FOLDER })}\n`);
    return 0;
  }
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
    // One line naming the setting: a transaction pooler is refused before anything runs.
    const message = error instanceof SessionRequiredError ? `refused: DATABASE_URL ${TRANSACTION_POOLER_REFUSAL}` : `failed: ${error instanceof Error ? error.message : String(error)}`;
    process.stderr.write(`retrysafe migrate ${message}\n`);
    process.exitCode = 1;
  },
);
