/**
 * The store's migrator: applies the package's migrations (schema `retrysafe`, journal `retrysafe.migrations`) with plain `pg`.
 *
 * @module @retrysafe/store/migrate
 */
// Applies a migration set to a database with plain pg (no Drizzle at run time): the store's own
// (the package's migrations folder, schema `retrysafe`, journal `retrysafe.migrations`) or another
// set laid out the same way (the Retrysafe server's demo tables). drizzle-kit writes the folders
// (meta/_journal.json plus one SQL file per migration); this applies them. Processes migrating
// at once serialise on an advisory lock; each migration runs in its own transaction, with the
// set's schema first on its search_path, so unqualified names in it land there.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { importLegacyJournal } from './legacy.js';

/** The store's migrations, shipped in the package beside dist/ and src/ (found from this module, not the working directory). */
export const STORE_MIGRATIONS_FOLDER = join(dirname(fileURLToPath(import.meta.url)), '..', 'migrations');

export interface MigrationSet {
  /** A drizzle-kit migrations folder: meta/_journal.json and `<tag>.sql` files. */
  folder: string;
  /** The Postgres schema the set's objects and its journal (`<schema>.migrations`) live in. */
  schema: string;
  /** pg_advisory_lock key serialising migrations of this set. */
  lockKey: bigint;
  /** A Drizzle-journal upgrade path for installs older than this journal (the store's only). */
  legacy?: boolean;
  /**
   * The tag of a migration that creates, on an empty schema, what every migration before it
   * left (a squashed baseline). A fresh install applies it and records the ones before it as done
   * with it; an install already on those applies what it lacks of them and records the
   * baseline without running it. Either way every tag ends up in the journal once.
   */
  baseline?: string;
}

/** The store's set: what `retrysafe migrate` applies. */
export const STORE_MIGRATIONS: MigrationSet = {
  folder: STORE_MIGRATIONS_FOLDER,
  schema: 'retrysafe',
  // The bytes of "rsmigr" as an integer (the key the Drizzle-era migrator used too).
  lockKey: 0x72736d696772n,
  legacy: true,
  // 0000-0027 created the dashboard's operators and sessions too (the Retrysafe server's set
  // moves them out); a fresh install gets the store alone from 0028.
  baseline: '0028_store_baseline',
};

export interface Migration {
  /** The file name without `.sql`, e.g. `0016_services`; the journal's key. */
  tag: string;
  /** drizzle-kit's creation time (ms), which Drizzle's journal recorded instead of the name. */
  when: number;
  sql: string;
  /** sha256 of the file, hex (what Drizzle recorded too). */
  hash: string;
}

const journals = new Map<string, Promise<Migration[]>>();

function parseJournal(text: string, folder: string): { tag: string; when: number; idx: number }[] {
  const parsed: unknown = JSON.parse(text);
  const entries = (parsed as { entries?: unknown } | null)?.entries;
  if (!Array.isArray(entries)) throw new Error(`${folder}/meta/_journal.json has no entries`);
  return entries.map((entry: unknown) => {
    const { tag, when, idx } = (entry ?? {}) as Record<string, unknown>;
    if (typeof tag !== 'string' || !/^[\w-]+$/.test(tag) || typeof when !== 'number' || typeof idx !== 'number') {
      throw new Error(`${folder}/meta/_journal.json has a malformed entry`);
    }
    return { tag, when, idx };
  });
}

/** The set's migrations, oldest first (read once per folder: health checks ask often). */
export function readMigrations(folder: string = STORE_MIGRATIONS_FOLDER): Promise<Migration[]> {
  let migrations = journals.get(folder);
  if (!migrations) {
    migrations = (async () => {
      const entries = parseJournal(await readFile(join(folder, 'meta', '_journal.json'), 'utf8'), folder).sort((a, b) => a.idx - b.idx);
      return Promise.all(
        entries.map(async ({ tag, when }) => {
          const sql = await readFile(join(folder, `${tag}.sql`), 'utf8');
          return { tag, when, sql, hash: createHash('sha256').update(sql).digest('hex') };
        }),
      );
    })();
    migrations.catch(() => journals.delete(folder));
    journals.set(folder, migrations);
  }
  return migrations;
}

/** Any `pg` client or pool: only `query` is used. */
export type MigrationClient = Pick<pg.ClientBase, 'query'>;

const quoteIdent = (name: string) => `"${name.replaceAll('"', '""')}"`;

export interface MigrationStatus {
  /** Tag of the newest applied migration, or null on an empty database. */
  current: string | null;
  /** Tag of the newest migration this build ships. */
  latest: string | null;
  pending: string[];
}

/** The set's migrations the database has applied, by name, from `<schema>.migrations`. */
async function appliedNames(client: MigrationClient, schema: string): Promise<Set<string>> {
  const journal = `${quoteIdent(schema)}.migrations`;
  const { rows } = await client.query<{ exists: boolean }>('SELECT to_regclass($1) IS NOT NULL AS exists', [journal]);
  if (!rows[0]?.exists) return new Set();
  return new Set((await client.query<{ name: string }>(`SELECT name FROM ${journal}`)).rows.map((row) => row.name));
}

export async function migrationStatus(client: MigrationClient, set: Pick<MigrationSet, 'folder' | 'schema'> = STORE_MIGRATIONS): Promise<MigrationStatus> {
  const migrations = await readMigrations(set.folder);
  const applied = await appliedNames(client, set.schema);
  return {
    current: migrations.filter((migration) => applied.has(migration.tag)).at(-1)?.tag ?? null,
    latest: migrations.at(-1)?.tag ?? null,
    pending: migrations.filter((migration) => !applied.has(migration.tag)).map((migration) => migration.tag),
  };
}

export interface ApplyResult {
  applied: string[];
  current: string | null;
}

export interface ApplyOptions {
  /** Session settings the migrations read (e.g. `retrysafe.store_layout`), set before the first. */
  settings?: Record<string, string>;
}

/** Applies the set's pending migrations on `client` (a connection of the owner role). */
export async function applyMigrations(client: pg.ClientBase, set: MigrationSet, options: ApplyOptions = {}): Promise<ApplyResult> {
  const migrations = await readMigrations(set.folder);
  const schema = quoteIdent(set.schema);
  for (const [name, value] of Object.entries(options.settings ?? {})) {
    await client.query('SELECT set_config($1, $2, false)', [name, value]);
  }
  await client.query('SELECT pg_advisory_lock($1)', [set.lockKey.toString()]);
  try {
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
    await client.query(`CREATE TABLE IF NOT EXISTS ${schema}.migrations (
      name text PRIMARY KEY,
      hash text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`);
    if (set.legacy) await importLegacyJournal(client, `${schema}.migrations`, migrations);
    const done = await appliedNames(client, set.schema);
    // (A folder that stops before the baseline, as tests use, has none.)
    const baseline = set.baseline === undefined ? -1 : migrations.findIndex((migration) => migration.tag === set.baseline);
    // Fresh (nothing before the baseline applied): the baseline stands for all before it.
    const fresh = baseline >= 0 && !done.has(set.baseline ?? '') && !migrations.slice(0, baseline).some((migration) => done.has(migration.tag));
    const applied: string[] = [];
    for (const [index, migration] of migrations.entries()) {
      if (done.has(migration.tag)) continue;
      if (fresh && index < baseline) continue;
      // On an install that came through the migrations before it, the baseline is recorded, not run.
      const run = !(index === baseline && !fresh);
      await client.query('BEGIN');
      try {
        await client.query(`SET LOCAL search_path = ${schema}, pg_temp`);
        if (run) {
          for (const statement of migration.sql.split('--> statement-breakpoint')) {
            if (statement.trim() !== '') await client.query(statement);
          }
        }
        await client.query(`INSERT INTO ${schema}.migrations (name, hash) VALUES ($1, $2)`, [migration.tag, migration.hash]);
        if (fresh && index === baseline) {
          for (const before of migrations.slice(0, baseline)) {
            await client.query(`INSERT INTO ${schema}.migrations (name, hash) VALUES ($1, $2)`, [before.tag, before.hash]);
          }
        }
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK');
        if (error instanceof Error) error.message = `migration ${migration.tag}: ${error.message}`;
        throw error;
      }
      applied.push(migration.tag);
    }
    return { applied, current: (await migrationStatus(client, set)).current };
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [set.lockKey.toString()]);
  }
}

export type StoreLayout = 'plain' | 'partitioned';

export interface MigrateOptions {
  /** The key store's layout, chosen when a database is first migrated (read by migration 0004). */
  layout?: StoreLayout;
  /** Another folder of the store's migrations (tests: a folder that stops early). */
  folder?: string;
}

/** Migrations refused on a connection that cannot hold a session (a transaction-mode pooler). */
export class SessionRequiredError extends Error {
  readonly code = 'SESSION_REQUIRED';
}

/** Why migrations refuse a transaction pooler; callers name the setting (e.g. `DATABASE_URL: ...`). */
export const TRANSACTION_POOLER_REFUSAL =
  'goes through a transaction-mode pooler (two connections were served by one database backend): migrations hold a session advisory lock across transactions, which such a pooler does not keep. Migrate over a direct connection to the primary (or a session-mode pool)';

/**
 * Whether `connectionString` reaches Postgres through a transaction-mode pooler (PgBouncer
 * pool_mode=transaction). Two connections run `SELECT pg_backend_pid()` in turn, each its own
 * transaction: through such a pooler with a free server connection the second is served by the
 * backend the first just released; on a direct or session-pooled connection never (a backend
 * serves one session). A few rounds, in case another client takes that backend in between. A
 * connection that fails throws pg's error.
 */
export async function behindTransactionPooler(connectionString: string, options: { rounds?: number; connectionTimeoutMillis?: number } = {}): Promise<boolean> {
  const open = async () => {
    const client = new pg.Client({ connectionString, application_name: 'retrysafe-probe', connectionTimeoutMillis: options.connectionTimeoutMillis ?? 10_000 });
    client.on('error', () => undefined);
    await client.connect();
    return client;
  };
  const first = await open();
  try {
    const second = await open();
    try {
      const pid = async (client: pg.Client) => (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
      for (let round = 0; round < (options.rounds ?? 3); round += 1) {
        if ((await pid(first)) === (await pid(second))) return true;
      }
      return false;
    } finally {
      await second.end().catch(() => undefined);
    }
  } finally {
    await first.end().catch(() => undefined);
  }
}

/**
 * Migrates the store's schema (`retrysafe`) of the database at `connectionString`; refuses
 * (SessionRequiredError) one reached through a transaction-mode pooler.
 */
export async function migrate(connectionString: string, options: MigrateOptions = {}): Promise<ApplyResult> {
  if (await behindTransactionPooler(connectionString)) throw new SessionRequiredError(`the database connection ${TRANSACTION_POOLER_REFUSAL}`);
  const client = new pg.Client({ connectionString, application_name: 'retrysafe-migrate' });
  await client.connect();
  try {
    return await applyMigrations(client, { ...STORE_MIGRATIONS, folder: options.folder ?? STORE_MIGRATIONS_FOLDER }, {
      settings: { 'retrysafe.store_layout': options.layout ?? 'plain' },
    });
  } finally {
    await client.end();
  }
}
