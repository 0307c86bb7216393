// `npm run cli -- <command>`: each command prints one JSON object on stdout and
// exits non-zero with a message on stderr on error. Uses DATABASE_URL, else the
// embedded database that `npm start` uses (starting it if it is not running).
// The server's composition root (server/runtime.ts) with only what a command needs: the owner's
// pool (`retrysafe-cli`, two connections, opened on first use: print-only commands open none)
// and a session pool for the sweep; its stop() closes them, then leaves the database.
import { prepareDatabase, type Prepared } from '../../db/prepare';
import { DATA_DIR, openDatabase } from '../../db/database-url';
import { ConfigurationError, readEnvironment } from '../config';
import { createServerRuntime, type ServerRuntime } from '../runtime';
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

type Run = (args: string[], runtime: ServerRuntime, prepared: Prepared) => Promise<unknown>;

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
  migrate(args, _runtime, prepared) {
    expectNoArguments('migrate', args);
    // Through a transaction pooler with no DATABASE_DIRECT_URL, even with nothing pending: say so.
    if (!prepared.migrated) throw new ConfigurationError(prepared.refused);
    return Promise.resolve({ applied: prepared.migrated.applied, current: prepared.migrated.current });
  },
  async sweep(args, runtime) {
    expectNoArguments('sweep', args);
    // The sweeper's session advisory lock needs a direct connection (db/topology.ts).
    const pool = runtime.sessionPool('Sweeping');
    // The evidence compares against the policies, so they must exist (first run before npm start).
    await ensurePolicies(pool, DEMO_SERVICE, defaultPolicyFields, 'system');
    const result = await sweepOnce(pool, 'manual');
    if (result.status === 'failed') throw new Error(`sweep run ${result.runId} failed: ${result.error ?? 'unknown error'}`);
    return result;
  },
  async 'rotate-keys'(args, runtime) {
    // The keys are one service's (this server's demo API unless --service names another, run
    // with that service's RESPONSE_ENCRYPTION_KEYS); other services' rows are only counted.
    const { service = DEMO_SERVICE } = parseOptions(args, ['service']);
    const name = serviceNameSchema.safeParse(service);
    if (!name.success) throw new UsageError(`rotate-keys: --service ${name.error.issues[0]?.message ?? 'is invalid'}`);
    // The keys `npm start` hands the server: RESPONSE_ENCRYPTION_KEYS, else in embedded
    // mode (no DATABASE_URL) the ones kept under .data/.
    const { environment } = runtime;
    let keys = environment.RESPONSE_ENCRYPTION_KEYS;
    if (!keys && !environment.DATABASE_URL) {
      const local = await loadOrCreateLocalSecrets(DATA_DIR);
      keys = readEnvironment({ ...process.env, RESPONSE_ENCRYPTION_KEYS: local.responseEncryptionKeys }).RESPONSE_ENCRYPTION_KEYS;
    }
    if (!keys) throw new ConfigurationError('RESPONSE_ENCRYPTION_KEYS must be set when DATABASE_URL is set');
    return rotateResponseKeys(runtime.ownerPool, new ResponseKeyRing(keys), name.data);
  },
  async user(args, runtime) {
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
    const operator = await createOperator(runtime.ownerPool, parsed.data, { system: 'cli' });
    return { id: operator.id, email: operator.email, role: operator.role };
  },
  demo(args, runtime) {
    // Stages an incident for the running server's demo traffic to play (server/demo/incidents.ts).
    const [action, kind, ...rest] = args;
    if (action !== 'incident' || kind === undefined) throw new UsageError(`usage: ${usages.demo}`);
    const options = parseOptions(rest, ['minutes']);
    if (options.minutes === undefined) throw new UsageError(`demo incident: --minutes is required (1 to 60)\nusage: ${usages.demo}`);
    const parsed = stageIncidentInput.safeParse({ kind, minutes: /^\d+$/.test(options.minutes) ? options.minutes : Number.NaN });
    if (!parsed.success) {
      throw new UsageError(`demo incident: ${parsed.error.issues.map((issue) => `${issue.path[0] === 'kind' ? `incident ${kind}` : `--minutes ${options.minutes ?? ''}`} ${issue.message}`).join('; ')}\nusage: ${usages.demo}`);
    }
    return stageIncident(runtime.ownerPool, parsed.data);
  },
  tenant(args, runtime) {
    const [action, ...rest] = args;
    if (action !== 'create') throw new UsageError(`usage: ${usages.tenant}`);
    const name = rest.join(' ').trim();
    if (name.length < 1 || name.length > 200) throw new UsageError('tenant create needs a name of 1 to 200 characters');
    return createTenant(runtime.ownerPool, name);
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
  // Handed the database: its stop() closes the pools a command used, then leaves the database.
  const runtime = createServerRuntime({ environment, databaseUrl: database.url, database, owner: { applicationName: 'retrysafe-cli', max: 2 } });
  try {
    let result: unknown;
    if (print) {
      result = await print(args, database.url);
    } else if (run) {
      // The current schema: migrated (a no-op when current), or through a transaction pooler
      // with no DATABASE_DIRECT_URL, checked to be current. Bad settings stop here.
      const prepared = await prepareDatabase(environment, database.url, (line) => process.stderr.write(`${line}\n`));
      result = await run(args, runtime, prepared);
    }
    process.stdout.write(`${JSON.stringify(result)}\n`);
    return 0;
  } finally {
    await runtime.stop();
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
