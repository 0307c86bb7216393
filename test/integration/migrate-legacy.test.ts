// An install from before the store's own schema (everything in public, migrated by Drizzle's
// migrator into drizzle.__drizzle_migrations) upgrades in place: the migrator takes the store's
// entries of Drizzle's journal as applied, moves the tables (rows, partitions, functions) to
// retrysafe and the demo's to retrysafe_demo, and applies only what is new.
import { randomBytes, randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate as drizzleMigrate } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createRetrysafe, STORE_SCHEMA_VERSION } from '@retrysafe/store';
import { DEMO_MIGRATIONS, SERVER_MIGRATIONS, migrateDatabase, readJournal } from '../../db/migrate';
import { createTestDatabase, layouts } from '../helpers/database';
import { jsonResult, testPolicy } from '../../packages/store/test/helpers/store';

const DRIZZLE_ERA = fileURLToPath(new URL('../fixtures/drizzle-era-migrations', import.meta.url));
const responseKeys = `k1:${randomBytes(32).toString('base64')}`;

/** Installs the store as a release before the own schema did (db/migrate.ts then: Drizzle's migrator). */
async function installDrizzleEra(url: string, layout: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`SELECT set_config('retrysafe.store_layout', $1, false)`, [layout]);
    await drizzleMigrate(drizzle(client), { migrationsFolder: DRIZZLE_ERA, migrationsSchema: 'drizzle', migrationsTable: '__drizzle_migrations' });
  } finally {
    await client.end();
  }
}

const rowsOf = async (client: pg.Client, table: string) => (await client.query<{ row: string }>(`SELECT t::text AS row FROM ${table} t ORDER BY 1`)).rows.map((row) => row.row);

describe.each(layouts)('upgrading a Drizzle-era install (%s layout)', (layout) => {
  it('moves its tables out of public with their rows and applies only the new migrations', async () => {
    const db = await createTestDatabase({ empty: true, serverSearchPath: false });
    const client = new pg.Client({ connectionString: db.url });
    try {
      await installDrizzleEra(db.url, layout);
      await client.connect();
      await client.query(`INSERT INTO public.idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
        SELECT gen_random_uuid(), 'demo', 'POST /x', 'k' || i, 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), now(), now() + interval '1 day'
        FROM generate_series(1, 20) AS i`);
      await client.query(`INSERT INTO public.tenants (name, api_key_hash) VALUES ('acme', decode(repeat('cd', 32), 'hex'));
        INSERT INTO public.payments (id, principal_id, amount, currency, status) SELECT 'pay_1', id, 500, 'EUR', 'succeeded' FROM public.tenants;
        INSERT INTO public.audit_log (actor, action, target, reason) VALUES ('ops', 'test.legacy', '{}'::jsonb, 'before the upgrade')`);
      const keys = await rowsOf(client, 'public.idempotency_keys');
      const tenants = await rowsOf(client, 'public.tenants');
      const payments = await rowsOf(client, 'public.payments');
      const audit = await rowsOf(client, 'public.audit_log');
      const partitions = (await client.query<{ name: string }>("SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'public.idempotency_keys'::regclass ORDER BY 1")).rows.map((row) => row.name);
      expect(partitions.length > 0).toBe(layout === 'partitioned');

      // A service built on this package refuses the old store, saying what to do.
      await expect(createRetrysafe({ connectionString: db.url, service: 'orders', fingerprintSecret: randomBytes(32), responseKeys })).rejects.toThrow(
        new RegExp(`version 2 \\(in schema public\\), older than this @retrysafe/store's ${STORE_SCHEMA_VERSION}: migrate the database with \`npx retrysafe migrate\``),
      );

      const result = await migrateDatabase(db.url, { layout });
      // Not re-migrated from 0000: only the own schema and what came after it, and the demo's set (whose tables it finds in place).
      const storeTags = (await readJournal()).map((entry) => entry.tag);
      expect(result.applied).toEqual([...storeTags.slice(storeTags.indexOf('0017_own_schema')), ...(await readJournal(DEMO_MIGRATIONS.folder)).map((entry) => entry.tag), ...(await readJournal(SERVER_MIGRATIONS.folder)).map((entry) => entry.tag)]);
      const journal = await client.query<{ name: string }>('SELECT name FROM retrysafe.migrations ORDER BY name');
      expect(journal.rows.map((row) => row.name)).toEqual((await readJournal()).map((entry) => entry.tag));
      // Drizzle's journal stays as it was (another application may share it).
      expect((await client.query('SELECT 1 FROM drizzle.__drizzle_migrations')).rowCount).toBe(17);

      // Nothing of ours left in public; the rows where the tables went.
      const left = await client.query<{ name: string }>(
        `SELECT relname::text AS name FROM pg_class WHERE relnamespace = 'public'::regnamespace
         UNION ALL SELECT proname::text FROM pg_proc WHERE pronamespace = 'public'::regnamespace`,
      );
      expect(left.rows).toEqual([]);
      expect(await rowsOf(client, 'retrysafe.idempotency_keys')).toEqual(keys);
      expect(await rowsOf(client, 'retrysafe_demo.tenants')).toEqual(tenants);
      expect(await rowsOf(client, 'retrysafe_demo.payments')).toEqual(payments);
      // The audit log went on to the server's schema (its set's 0002), rows kept.
      expect(await rowsOf(client, 'retrysafe_server.audit_log')).toEqual(audit);
      const moved = await client.query<{ name: string }>("SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'retrysafe.idempotency_keys'::regclass AND c.relnamespace = 'retrysafe'::regnamespace ORDER BY 1");
      expect(moved.rows.map((row) => row.name)).toEqual(partitions);
      // Every function resolves its names in retrysafe now, not public.
      const functions = await client.query<{ name: string; config: string[] | null }>("SELECT proname AS name, proconfig AS config FROM pg_proc WHERE pronamespace = 'retrysafe'::regnamespace");
      expect(functions.rows.map((fn) => fn.name).sort()).toEqual(['retrysafe_claim_partitioned', 'retrysafe_ensure_partitions', 'retrysafe_release_stale_claim', 'retrysafe_store_schema_version']);
      for (const fn of functions.rows) expect(fn.config, fn.name).toContain('search_path=retrysafe, pg_temp');
      // The dashboard's operator and session functions went on to the server's schema (its set's 0001), resolving there first.
      const serverFunctions = await client.query<{ name: string; config: string[] | null }>("SELECT proname AS name, proconfig AS config FROM pg_proc WHERE pronamespace = 'retrysafe_server'::regnamespace");
      expect(serverFunctions.rows.length).toBeGreaterThan(10);
      for (const fn of serverFunctions.rows) expect(fn.config, fn.name).toContain('search_path=retrysafe_server, retrysafe, pg_temp');
      // The append-only trigger still refuses a change to the audit log.
      await expect(client.query("UPDATE retrysafe_server.audit_log SET reason = 'x'")).rejects.toThrow(/append-only/);

      // And a service works on it, through a pool with Postgres's default search_path.
      const retrysafe = await createRetrysafe({ connectionString: db.url, service: 'orders', fingerprintSecret: randomBytes(32), responseKeys });
      try {
        const request = { principalId: randomUUID(), endpoint: 'POST /orders', method: 'POST', key: 'k1', body: { sku: 'a' }, policy: testPolicy, mode: 'claim-first' as const };
        const first = await retrysafe.store.execute({ ...request, work: () => Promise.resolve(jsonResult(201, { id: 1 })) });
        const again = await retrysafe.store.execute({ ...request, work: () => Promise.reject(new Error('a replay must not run the work')) });
        expect(again).toMatchObject({ replayed: true, status: 201, correlationId: first.correlationId });
      } finally {
        await retrysafe.stop();
      }
      // A second migration finds nothing to do and imports nothing again.
      expect((await migrateDatabase(db.url, { layout })).applied).toEqual([]);
    } finally {
      await client.end();
      await db.drop();
    }
  });
});
