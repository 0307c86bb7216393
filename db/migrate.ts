// Applies the committed drizzle-kit migrations. Two processes migrating at once
// (two instances starting together) serialise on a session advisory lock, so the
// second finds the work done instead of failing halfway through it.
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';
import { z } from 'zod';
import { detectLayout } from '@retrysafe/store';
import { applyDashboardGrants, type GrantsResult } from './dashboard-access';

export const MIGRATIONS_FOLDER = resolve(process.cwd(), 'db', 'migrations');
/** Where drizzle records applied migrations (its defaults, stated so queries can name them). */
const MIGRATIONS_SCHEMA = 'drizzle';
const MIGRATIONS_TABLE = '__drizzle_migrations';
/** pg_advisory_lock key for migrations: the bytes of "rsmigr" as an integer. */
const MIGRATION_LOCK_KEY = 0x72736d696772n;

const journalSchema = z.object({
  entries: z.array(z.object({ idx: z.number(), when: z.number(), tag: z.string() })),
});
export type MigrationEntry = z.infer<typeof journalSchema>['entries'][number];

const journals = new Map<string, Promise<MigrationEntry[]>>();

/** The migrations this build ships, oldest first (read once per folder: /api/health asks often). */
export function readJournal(folder = MIGRATIONS_FOLDER): Promise<MigrationEntry[]> {
  let journal = journals.get(folder);
  if (!journal) {
    journal = readFile(join(folder, 'meta', '_journal.json'), 'utf8').then((text) =>
      journalSchema.parse(JSON.parse(text)).entries.sort((a, b) => a.idx - b.idx),
    );
    journal.catch(() => journals.delete(folder));
    journals.set(folder, journal);
  }
  return journal;
}

export interface MigrationStatus {
  /** Tag of the newest applied migration, or null on an empty database. */
  current: string | null;
  /** Tag of the newest migration this build ships. */
  latest: string | null;
  pending: string[];
}

/** Which shipped migrations the database has applied (drizzle keys them by their journal time). */
export async function migrationStatus(client: pg.ClientBase | pg.Pool, folder = MIGRATIONS_FOLDER): Promise<MigrationStatus> {
  const journal = await readJournal(folder);
  const { rows } = await client.query<{ exists: boolean }>('SELECT to_regclass($1) IS NOT NULL AS exists', [
    `${MIGRATIONS_SCHEMA}.${MIGRATIONS_TABLE}`,
  ]);
  const applied = new Set<number>();
  if (rows[0]?.exists) {
    const result = await client.query<{ created_at: string }>(
      `SELECT created_at FROM ${MIGRATIONS_SCHEMA}.${MIGRATIONS_TABLE}`,
    );
    for (const row of result.rows) applied.add(Number(row.created_at));
  }
  const done = journal.filter((entry) => applied.has(entry.when));
  return {
    current: done.at(-1)?.tag ?? null,
    latest: journal.at(-1)?.tag ?? null,
    pending: journal.filter((entry) => !applied.has(entry.when)).map((entry) => entry.tag),
  };
}

export interface MigrateResult {
  applied: string[];
  current: string | null;
  /** The dashboard role's grants (db/dashboard-access.ts), re-applied after every migration. */
  dashboardGrants: GrantsResult;
}

export type StoreLayout = 'plain' | 'partitioned';

export interface MigrateOptions {
  folder?: string;
  /** The key store's layout, chosen at install time (read by the partitioned-layout migration). */
  layout?: StoreLayout;
}

export async function migrateDatabase(connectionString: string, options: MigrateOptions = {}): Promise<MigrateResult> {
  const folder = options.folder ?? MIGRATIONS_FOLDER;
  const client = new pg.Client({ connectionString, application_name: 'retrysafe-migrate' });
  await client.connect();
  try {
    await client.query(`SELECT set_config('retrysafe.store_layout', $1, false)`, [options.layout ?? 'plain']);
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY.toString()]);
    try {
      const before = await migrationStatus(client, folder);
      await migrate(drizzle(client), {
        migrationsFolder: folder,
        migrationsSchema: MIGRATIONS_SCHEMA,
        migrationsTable: MIGRATIONS_TABLE,
      });
      const after = await migrationStatus(client, folder);
      const dashboardGrants = await applyDashboardGrants(client);
      return { applied: before.pending.filter((tag) => !after.pending.includes(tag)), current: after.current, dashboardGrants };
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY.toString()]);
    }
  } finally {
    await client.end();
  }
}

/** The layout the database has: partitioned when idempotency_keys is a partitioned table (the store's own reading of it). */
export function detectStoreLayout(db: pg.ClientBase | pg.Pool): Promise<StoreLayout> {
  return detectLayout(db);
}
