// #14's acceptance: a database shared with an application of its own that migrates with Drizzle
// (journal drizzle.__drizzle_migrations) and has tables called tenants and payments in public.
// The store's migrations and the application's apply in either order, the application's later
// migration still applies after ours (Drizzle applies only migrations newer than the last it
// recorded), and neither touches the other's tables. The database keeps Postgres's default
// search_path, as an adopter's does: the store works there through its own qualified names.
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate as drizzleMigrate } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRetrysafe } from '@retrysafe/store';
import { migrate as retrysafeMigrate } from '@retrysafe/store/migrate';
import { migrateDatabase, readJournal } from '../../db/migrate';
import { createTestDatabase } from '../helpers/database';
import { jsonResult, testPolicy } from '../../packages/store/test/helpers/store';

/** The foreign application's migrations, as drizzle-kit lays them out. */
const FOREIGN_MIGRATIONS = [
  {
    tag: '0000_shop',
    when: 1_700_000_000_000,
    sql: `CREATE TABLE "tenants" ("id" serial PRIMARY KEY, "name" text NOT NULL, "plan" text NOT NULL);
--> statement-breakpoint
CREATE TABLE "payments" ("id" serial PRIMARY KEY, "tenant_id" integer NOT NULL REFERENCES "tenants"("id"), "amount_cents" integer NOT NULL);
--> statement-breakpoint
CREATE INDEX "payments_tenant_idx" ON "payments" ("tenant_id");`,
  },
  {
    tag: '0001_shop_refunds',
    when: 1_700_000_100_000,
    sql: `ALTER TABLE "payments" ADD COLUMN "note" text;
--> statement-breakpoint
CREATE TABLE "refunds" ("id" serial PRIMARY KEY, "payment_id" integer NOT NULL REFERENCES "payments"("id"));`,
  },
];

/** A drizzle-kit folder holding the foreign application's first `count` migrations. */
async function foreignFolder(root: string, count: number): Promise<string> {
  const folder = join(root, `foreign-${count}`);
  await mkdir(join(folder, 'meta'), { recursive: true });
  const entries = FOREIGN_MIGRATIONS.slice(0, count);
  for (const entry of entries) await writeFile(join(folder, `${entry.tag}.sql`), entry.sql);
  await writeFile(
    join(folder, 'meta', '_journal.json'),
    JSON.stringify({ version: '7', dialect: 'postgresql', entries: entries.map((entry, idx) => ({ idx, version: '7', when: entry.when, tag: entry.tag, breakpoints: true })) }),
  );
  return folder;
}

/** The foreign application migrating itself, the way it always has: Drizzle's migrator, Drizzle's journal. */
async function migrateForeign(url: string, folder: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await drizzleMigrate(drizzle(client), { migrationsFolder: folder });
  } finally {
    await client.end();
  }
}

interface Picture {
  /** Every relation of the schema: name, kind, and its columns. */
  relations: string[];
  functions: string[];
  /** Each table's rows, as text. */
  rows: Record<string, string[]>;
}

/** What a schema holds, to compare before and after the other application migrated. */
async function picture(client: pg.Client, schema: string): Promise<Picture> {
  const relations = await client.query<{ line: string }>(
    `SELECT c.relname::text || ' ' || c.relkind::text || ' ' || coalesce((SELECT string_agg(a.attname::text || ':' || format_type(a.atttypid, a.atttypmod), ',' ORDER BY a.attnum)
              FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '') AS line
     FROM pg_class c WHERE c.relnamespace = to_regnamespace($1) ORDER BY c.relname`,
    [schema],
  );
  const functions = await client.query<{ line: string }>(
    `SELECT p.oid::regprocedure::text || ' ' || coalesce(array_to_string(p.proconfig, ';'), '') AS line FROM pg_proc p WHERE p.pronamespace = to_regnamespace($1) ORDER BY 1`,
    [schema],
  );
  const tables = await client.query<{ name: string }>(`SELECT c.relname AS name FROM pg_class c WHERE c.relnamespace = to_regnamespace($1) AND c.relkind IN ('r', 'p') ORDER BY 1`, [schema]);
  const rows: Record<string, string[]> = {};
  for (const { name } of tables.rows) {
    const table = `${client.escapeIdentifier(schema)}.${client.escapeIdentifier(name)}`;
    rows[name] = (await client.query<{ row: string }>(`SELECT t::text AS row FROM ${table} t ORDER BY 1`)).rows.map((row) => row.row);
  }
  return { relations: relations.rows.map((row) => row.line), functions: functions.rows.map((row) => row.line), rows };
}

const appliedByDrizzle = async (client: pg.Client) =>
  (await client.query<{ created_at: string }>('SELECT created_at::text AS created_at FROM drizzle.__drizzle_migrations ORDER BY id')).rows.map((row) => Number(row.created_at));

/** The store serving a request through an adopter's pool with the default search_path. */
async function storeServes(url: string): Promise<void> {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  try {
    const { rows } = await pool.query<{ search_path: string }>('SHOW search_path');
    expect(rows[0]?.search_path).toBe('"$user", public');
    const retrysafe = await createRetrysafe({ pool, service: 'shop', fingerprintSecret: randomBytes(32), responseKeys: `k1:${randomBytes(32).toString('base64')}` });
    try {
      const request = { principalId: randomUUID(), endpoint: 'POST /payments', method: 'POST', key: 'k1', body: { amount: 5 }, policy: testPolicy, mode: 'claim-first' as const };
      const first = await retrysafe.store.execute({ ...request, work: () => Promise.resolve(jsonResult(201, { id: 1 })) });
      const again = await retrysafe.store.execute({ ...request, work: () => Promise.reject(new Error('a replay must not run the work')) });
      expect(first.replayed).toBe(false);
      expect(again).toMatchObject({ replayed: true, status: 201, correlationId: first.correlationId });
    } finally {
      await retrysafe.stop();
    }
  } finally {
    await pool.end();
  }
}

describe('a database shared with a foreign Drizzle application (tenants, payments)', () => {
  let root: string;
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'retrysafe-foreign-'));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('the foreign application first, then the store (and the server with its demo tables), then the foreign application\'s next migration', async () => {
    const db = await createTestDatabase({ empty: true, serverSearchPath: false });
    const client = new pg.Client({ connectionString: db.url });
    try {
      await migrateForeign(db.url, await foreignFolder(root, 1));
      await client.connect();
      await client.query(`INSERT INTO tenants (name, plan) VALUES ('acme', 'gold'), ('globex', 'free');
        INSERT INTO payments (tenant_id, amount_cents) VALUES (1, 500), (2, 700)`);
      const foreignBefore = await picture(client, 'public');

      const store = await retrysafeMigrate(db.url);
      expect(store.applied.at(-1)).toBe((await readJournal()).at(-1)?.tag);
      // The Retrysafe server's own migration (its demo's tenants and payments, the dashboard grants) too.
      await migrateDatabase(db.url);
      expect(await picture(client, 'public')).toEqual(foreignBefore);
      expect(await appliedByDrizzle(client)).toEqual([FOREIGN_MIGRATIONS[0]?.when]);
      // Our tables are ours, theirs are theirs: the demo's tenants are not the application's.
      const { rows } = await client.query<{ ours: string; theirs: string; grant: boolean }>(
        `SELECT to_regclass('retrysafe_demo.tenants')::text AS ours, to_regclass('public.tenants')::text AS theirs,
                has_table_privilege('retrysafe_dashboard', 'public.tenants', 'SELECT') AS grant`,
      );
      expect(rows[0]).toEqual({ ours: 'retrysafe_demo.tenants', theirs: 'tenants', grant: false });
      await storeServes(db.url);

      // The application's next migration: Drizzle still finds its own journal where it left it.
      const ourBefore = await picture(client, 'retrysafe');
      await migrateForeign(db.url, await foreignFolder(root, 2));
      expect(await appliedByDrizzle(client)).toEqual(FOREIGN_MIGRATIONS.map((entry) => entry.when));
      expect((await client.query("SELECT 1 FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'payments' AND column_name = 'note'")).rowCount).toBe(1);
      expect(await picture(client, 'retrysafe')).toEqual(ourBefore);
      // And ours again: nothing to do, nothing imported from Drizzle's journal.
      expect((await retrysafeMigrate(db.url)).applied).toEqual([]);
      expect(await picture(client, 'retrysafe')).toEqual(ourBefore);
    } finally {
      await client.end();
      await db.drop();
    }
  });

  it('the store first, then the foreign application, both of its migrations', async () => {
    const db = await createTestDatabase({ empty: true, serverSearchPath: false });
    const client = new pg.Client({ connectionString: db.url });
    try {
      await retrysafeMigrate(db.url);
      await client.connect();
      // Nothing of ours in public, and no Drizzle journal of ours.
      expect(await picture(client, 'public')).toEqual({ relations: [], functions: [], rows: {} });
      expect((await client.query("SELECT to_regnamespace('drizzle') AS drizzle")).rows[0]).toEqual({ drizzle: null });
      await storeServes(db.url);
      const ourBefore = await picture(client, 'retrysafe');

      await migrateForeign(db.url, await foreignFolder(root, 1));
      await migrateForeign(db.url, await foreignFolder(root, 2));
      expect(await appliedByDrizzle(client)).toEqual(FOREIGN_MIGRATIONS.map((entry) => entry.when));
      expect((await picture(client, 'public')).relations.map((line) => line.split(' ')[0])).toEqual(
        expect.arrayContaining(['tenants', 'payments', 'refunds', 'payments_tenant_idx']),
      );
      expect(await picture(client, 'retrysafe')).toEqual(ourBefore);

      const foreignBefore = await picture(client, 'public');
      expect((await retrysafeMigrate(db.url)).applied).toEqual([]);
      await migrateDatabase(db.url);
      expect(await picture(client, 'public')).toEqual(foreignBefore);
      await storeServes(db.url);
    } finally {
      await client.end();
      await db.drop();
    }
  });
});
