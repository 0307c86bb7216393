// `npm run cli -- <command>`: each command prints one JSON object on stdout and
// exits non-zero with a message on stderr on error. Uses DATABASE_URL, else the
// embedded database that `npm start` uses (starting it if it is not running).
import { migrateDatabase } from '../../db/migrate';
import { DATA_DIR, openDatabase } from '../../db/database-url';
import pg from 'pg';
import { ConfigurationError, readEnvironment } from '../config';
import { createPool, SERVER_SEARCH_PATH_OPTIONS } from '../../db/client';
import { DEMO_SERVICE, defaultPolicyFields } from '../demo/policies';
import { serviceNameSchema } from '../service-name';
import { createTenant } from '../demo/tenants';
import { ensurePolicies } from '../retention/policies';
import { sweepOnce } from '../retention/sweeper';
import { createOperator, newOperatorSchema } from '../auth/operators';
import { DASHBOARD_ROLE, dashboardGrantStatements } from '../../db/dashboard-access';
import { loadOrCreateLocalSecrets } from '../../db/local-secrets';
import { rotateResponseKeys } from '../idempotency/key-rotation';
import { ResponseKeyRing } from '@retrysafe/store';

type Command = (args: string[], databaseUrl: string) => Promise<unknown>;

const commands: Record<string, Command> = {
  async migrate(args, databaseUrl) {
    expectNoArguments('migrate', args);
    const result = await migrateDatabase(databaseUrl, { layout: readEnvironment().STORE_LAYOUT });
    return { applied: result.applied, current: result.current };
  },
  async sweep(args, databaseUrl) {
    expectNoArguments('sweep', args);
    const pool = createPool(databaseUrl, { applicationName: 'retrysafe-cli-sweep', max: 2 });
    try {
      // The evidence compares against the policies, so they must exist (first run before npm start).
      await ensurePolicies(pool, DEMO_SERVICE, defaultPolicyFields, 'system');
      const result = await sweepOnce(pool, 'manual');
      if (result.status === 'failed') throw new Error(`sweep run ${result.runId} failed: ${result.error ?? 'unknown error'}`);
      return result;
    } finally {
      await pool.end();
    }
  },
  async 'rotate-keys'(args, databaseUrl) {
    // The keys are one service's (this server's demo API unless --service names another, run
    // with that service's RESPONSE_ENCRYPTION_KEYS); other services' rows are only counted.
    const { service = DEMO_SERVICE } = parseOptions(args, ['service']);
    const name = serviceNameSchema.safeParse(service);
    if (!name.success) throw new UsageError(`rotate-keys: --service ${name.error.issues[0]?.message ?? 'is invalid'}`);
    // The keys `npm start` hands the server: RESPONSE_ENCRYPTION_KEYS, else in embedded
    // mode (no DATABASE_URL) the ones kept under .data/.
    const environment = readEnvironment();
    let keys = environment.RESPONSE_ENCRYPTION_KEYS;
    if (!keys && !environment.DATABASE_URL) {
      const local = await loadOrCreateLocalSecrets(DATA_DIR);
      keys = readEnvironment({ ...process.env, RESPONSE_ENCRYPTION_KEYS: local.responseEncryptionKeys }).RESPONSE_ENCRYPTION_KEYS;
    }
    if (!keys) throw new ConfigurationError('RESPONSE_ENCRYPTION_KEYS must be set when DATABASE_URL is set');
    const pool = createPool(databaseUrl, { applicationName: 'retrysafe-cli-rotate-keys', max: 1 });
    try {
      return await rotateResponseKeys(pool, new ResponseKeyRing(keys), name.data);
    } finally {
      await pool.end();
    }
  },
  async user(args, databaseUrl) {
    const [action, ...rest] = args;
    if (action !== 'create') throw new UsageError('usage: user create --email E --password P --role viewer|operator|compliance|admin');
    const options = parseOptions(rest, ['email', 'password', 'role']);
    const parsed = newOperatorSchema.safeParse(options);
    if (!parsed.success) throw new UsageError(`user create: ${parsed.error.issues.map((issue) => `--${issue.path.join('.')} ${issue.message}`).join('; ')}`);
    const pool = createPool(databaseUrl, { applicationName: 'retrysafe-cli-user', max: 2 });
    try {
      const operator = await createOperator(pool, parsed.data, { system: 'cli' });
      return { id: operator.id, email: operator.email, role: operator.role };
    } finally {
      await pool.end();
    }
  },
  db(args, databaseUrl) {
    if (args.join(' ') !== 'grants') throw new UsageError('usage: db grants');
    // For a DBA when the migrating role may not create roles: apply as a role that may,
    // then create a login role in it and set DASHBOARD_DATABASE_URL to that login.
    const database = decodeURIComponent(new URL(databaseUrl).pathname.slice(1));
    const sql = `${dashboardGrantStatements(database).join(';\n')};\n-- then: CREATE ROLE <login> LOGIN PASSWORD '<secret>' IN ROLE ${DASHBOARD_ROLE};`;
    return Promise.resolve({ role: DASHBOARD_ROLE, database, sql });
  },
  async tenant(args, databaseUrl) {
    const [action, ...rest] = args;
    if (action !== 'create') throw new UsageError('usage: tenant create <name>');
    const name = rest.join(' ').trim();
    if (name.length < 1 || name.length > 200) throw new UsageError('tenant create needs a name of 1 to 200 characters');
    const client = new pg.Client({ connectionString: databaseUrl, application_name: 'retrysafe-cli', options: SERVER_SEARCH_PATH_OPTIONS });
    await client.connect();
    try {
      return await createTenant(client, name);
    } finally {
      await client.end();
    }
  },
};

class UsageError extends Error {
  readonly code = 'USAGE';
}

/** `--name value` pairs; each name at most once, no others. */
function parseOptions(args: string[], names: string[]): Record<string, string> {
  const options: Record<string, string> = {};
  for (let i = 0; i < args.length; i += 2) {
    const name = args[i]?.replace(/^--/, '') ?? '';
    const value = args[i + 1];
    if (!args[i]?.startsWith('--') || !names.includes(name) || value === undefined || name in options) {
      throw new UsageError(`unexpected argument ${args[i] ?? ''}: expected ${names.map((known) => `--${known} <value>`).join(' ')}`);
    }
    options[name] = value;
  }
  return options;
}

function expectNoArguments(command: string, args: string[]): void {
  if (args.length > 0) throw new UsageError(`${command} takes no arguments (got: ${args.join(' ')})`);
}

function usage(): string {
  return `usage: npm run cli -- <command>\ncommands: ${Object.keys(commands).join(', ')}`;
}

async function main(argv: string[]): Promise<number> {
  const [name, ...args] = argv;
  const command = name === undefined ? undefined : commands[name];
  if (!command) {
    process.stderr.write(`${name === undefined ? 'no command given' : `unknown command: ${name}`}\n${usage()}\n`);
    return 2;
  }
  const environment = readEnvironment();
  const database = await openDatabase(environment.DATABASE_URL, (line) => process.stderr.write(`${line}\n`));
  try {
    // Every other command needs the current schema; migrating is a no-op when it is current.
    if (name !== 'migrate') await migrateDatabase(database.url, { layout: environment.STORE_LAYOUT });
    const result = await command(args, database.url);
    process.stdout.write(`${JSON.stringify(result)}\n`);
    return 0;
  } finally {
    await database.release();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    const message = error instanceof Error ? error.message : String(error);
    process.stderr.write(`error: ${message}\n`);
    process.exit(error instanceof UsageError ? 2 : 1);
  },
);
