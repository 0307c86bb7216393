// `npm run cli -- <command>`: each command prints one JSON object on stdout and
// exits non-zero with a message on stderr on error. Uses DATABASE_URL, else the
// embedded database that `npm start` uses (starting it if it is not running).
import { prepareDatabase, type Prepared } from '../../db/prepare';
import { sessionUrl } from '../../db/topology';
import { DATA_DIR, openDatabase } from '../../db/database-url';
import { ConfigurationError, readEnvironment } from '../config';
import { createPool } from '../../db/client';
import { logConnectionLost } from '../logging';
import { DEMO_SERVICE, defaultPolicyFields } from '../demo/policies';
import { serviceNameSchema } from '../service-name';
import { createTenant } from '../demo/tenants';
import { stageIncident, stageIncidentInput } from '../demo/incidents';
import { ensurePolicies } from '../retention/policies';
import { sweepOnce } from '../retention/sweeper';
import { createOperator, newOperatorSchema } from '../auth/operators';
import { DASHBOARD_ROLE, dashboardGrantStatements } from '../../db/dashboard-access';
import { loadOrCreateLocalSecrets } from '../../db/local-secrets';
import { rotateResponseKeys } from '../idempotency/key-rotation';
import { ResponseKeyRing } from '@retrysafe/store';
import { readPassword } from './password-input';

type Run = (args: string[], databaseUrl: string, prepared: Prepared) => Promise<unknown>;

/**
 * Commands that only print (db grants; help needs no database at all) never migrate nor
 * connect: a DBA reads the grants before the schema is there. Every other command needs the
 * schema current, `migrate` being the migration itself.
 */
const printOnly: Record<string, (args: string[], databaseUrl: string) => Promise<unknown>> = {
  db(args, databaseUrl) {
    if (args.join(' ') !== 'grants') throw new UsageError(`usage: ${usages.db}`);
    // For a DBA when the migrating role may not create roles: apply as a role that may,
    // then create a login role in it and set DASHBOARD_DATABASE_URL to that login.
    const database = decodeURIComponent(new URL(databaseUrl).pathname.slice(1));
    const sql = `${dashboardGrantStatements(database).join(';\n')};\n-- then: CREATE ROLE <login> LOGIN PASSWORD '<secret>' IN ROLE ${DASHBOARD_ROLE};`;
    return Promise.resolve({ role: DASHBOARD_ROLE, database, sql });
  },
};

const runs: Record<string, Run> = {
  migrate(args, _databaseUrl, prepared) {
    expectNoArguments('migrate', args);
    // Through a transaction pooler with no DATABASE_DIRECT_URL, even with nothing pending: say so.
    if (!prepared.migrated) throw new ConfigurationError(prepared.refused);
    return Promise.resolve({ applied: prepared.migrated.applied, current: prepared.migrated.current });
  },
  async sweep(args, databaseUrl) {
    expectNoArguments('sweep', args);
    // The sweeper's session advisory lock needs a direct connection (db/topology.ts).
    const pool = createPool(sessionUrl(readEnvironment(), databaseUrl, 'Sweeping'), { applicationName: 'retrysafe-cli-sweep', max: 2, onConnectionLost: logConnectionLost });
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
    const pool = createPool(databaseUrl, { applicationName: 'retrysafe-cli-rotate-keys', max: 1, onConnectionLost: logConnectionLost });
    try {
      return await rotateResponseKeys(pool, new ResponseKeyRing(keys), name.data);
    } finally {
      await pool.end();
    }
  },
  async user(args, databaseUrl) {
    const [action, ...rest] = args;
    if (action !== 'create') throw new UsageError(`usage: ${usages.user}`);
    const options = parseOptions(rest, ['email', 'password', 'role']);
    if (options.password === undefined) {
      options.password = await readPassword();
    } else {
      process.stderr.write('warning: --password leaves the password in the shell history and the process list; pipe it on stdin instead (omit --password)\n');
    }
    const parsed = newOperatorSchema.safeParse(options);
    if (!parsed.success) throw new UsageError(`user create: ${parsed.error.issues.map((issue) => `--${issue.path.join('.')} ${issue.message}`).join('; ')}`);
    const pool = createPool(databaseUrl, { applicationName: 'retrysafe-cli-user', max: 2, onConnectionLost: logConnectionLost });
    try {
      const operator = await createOperator(pool, parsed.data, { system: 'cli' });
      return { id: operator.id, email: operator.email, role: operator.role };
    } finally {
      await pool.end();
    }
  },
  async demo(args, databaseUrl) {
    // Stages an incident for the running server's demo traffic to play (server/demo/incidents.ts).
    const [action, kind, ...rest] = args;
    if (action !== 'incident' || kind === undefined) throw new UsageError(`usage: ${usages.demo}`);
    const options = parseOptions(rest, ['minutes']);
    if (options.minutes === undefined) throw new UsageError(`demo incident: --minutes is required (1 to 60)\nusage: ${usages.demo}`);
    const parsed = stageIncidentInput.safeParse({ kind, minutes: /^\d+$/.test(options.minutes) ? options.minutes : Number.NaN });
    if (!parsed.success) {
      throw new UsageError(`demo incident: ${parsed.error.issues.map((issue) => `${issue.path[0] === 'kind' ? `incident ${kind}` : `--minutes ${options.minutes ?? ''}`} ${issue.message}`).join('; ')}\nusage: ${usages.demo}`);
    }
    const pool = createPool(databaseUrl, { applicationName: 'retrysafe-cli-demo', max: 1, onConnectionLost: logConnectionLost });
    try {
      return await stageIncident(pool, parsed.data);
    } finally {
      await pool.end();
    }
  },
  async tenant(args, databaseUrl) {
    const [action, ...rest] = args;
    if (action !== 'create') throw new UsageError(`usage: ${usages.tenant}`);
    const name = rest.join(' ').trim();
    if (name.length < 1 || name.length > 200) throw new UsageError('tenant create needs a name of 1 to 200 characters');
    const pool = createPool(databaseUrl, { applicationName: 'retrysafe-cli', max: 1, onConnectionLost: logConnectionLost });
    try {
      return await createTenant(pool, name);
    } finally {
      await pool.end();
    }
  },
};

/** Each command's usage line, as `help` prints them. */
const usages: Record<string, string> = {
  migrate: 'migrate',
  sweep: 'sweep',
  'rotate-keys': 'rotate-keys [--service NAME]',
  user: 'user create --email E --role viewer|operator|compliance|admin (the password on stdin, or asked for; --password P works but stays in the shell history)',
  db: 'db grants',
  tenant: 'tenant create <name>',
  demo: 'demo incident noisy-tenant|key-reuse|slow-claims --minutes N (1 to 60; the running server\'s demo traffic plays it)',
  help: 'help',
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
  return `usage: npm run cli -- <command>\ncommands: ${Object.keys(usages).join(', ')}`;
}

function help(args: string[]): Promise<unknown> {
  expectNoArguments('help', args);
  return Promise.resolve({ usage: 'npm run cli -- <command>', commands: Object.values(usages) });
}

async function main(argv: string[]): Promise<number> {
  const [name, ...args] = argv;
  if (name === 'help' || name === '--help') {
    process.stdout.write(`${JSON.stringify(await help(args))}\n`);
    return 0;
  }
  const print = name === undefined ? undefined : printOnly[name];
  const run = name === undefined ? undefined : runs[name];
  if (!print && !run) {
    process.stderr.write(`${name === undefined ? 'no command given' : `unknown command: ${name}`}\n${usage()}\n`);
    return 2;
  }
  const environment = readEnvironment();
  const database = await openDatabase(environment.DATABASE_URL, (line) => process.stderr.write(`${line}\n`));
  try {
    let result: unknown;
    if (print) {
      result = await print(args, database.url);
    } else if (run) {
      // The current schema: migrated (a no-op when current), or through a transaction pooler
      // with no DATABASE_DIRECT_URL, checked to be current. Bad settings stop here.
      const prepared = await prepareDatabase(environment, database.url, (line) => process.stderr.write(`${line}\n`));
      result = await run(args, database.url, prepared);
    }
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
