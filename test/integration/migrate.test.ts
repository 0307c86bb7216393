import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { DEMO_MIGRATIONS, SERVER_MIGRATIONS, migrateDatabase, migrationStatus, readJournal } from '../../db/migrate';
import { STORE_MIGRATIONS } from '@retrysafe/store/migrate';
import { createTestDatabase } from '../helpers/database';

describe('migrateDatabase', () => {
  it('lets several processes migrate one empty database at once', async () => {
    const db = await createTestDatabase({ empty: true });
    try {
      const results = await Promise.all([migrateDatabase(db.url), migrateDatabase(db.url), migrateDatabase(db.url)]);
      const journal = await readJournal();
      const demo = await readJournal(DEMO_MIGRATIONS.folder);
      const server = await readJournal(SERVER_MIGRATIONS.folder);
      expect(server.map((entry) => entry.tag)).toContain('0000_server_events');
      // Exactly one of them did the work (the store's set from its baseline on, the demo's, the server's); the others found it done.
      const storeRun = journal.length - journal.findIndex((entry) => entry.tag === STORE_MIGRATIONS.baseline);
      expect(results.map((result) => result.applied.length).sort()).toEqual([0, 0, storeRun + demo.length + server.length]);
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      const status = await migrationStatus(client);
      const { rows } = await client.query<{ n: string }>('SELECT count(*) AS n FROM retrysafe.migrations');
      const drizzle = await client.query<{ exists: boolean }>("SELECT to_regnamespace('drizzle') IS NOT NULL AS exists");
      await client.end();
      // The store's own journal, every tag in it (those before the baseline recorded with it); Drizzle's is not even created (it belongs to whoever else uses Drizzle here).
      expect(drizzle.rows[0]?.exists).toBe(false);
      expect(status).toEqual({ current: journal.at(-1)?.tag, latest: journal.at(-1)?.tag, pending: [] });
      expect(Number(rows[0]?.n)).toBe(journal.length);
    } finally {
      await db.drop();
    }
  });

  it('is a no-op on a current database', async () => {
    const db = await createTestDatabase();
    try {
      const result = await migrateDatabase(db.url);
      expect(result.applied).toEqual([]);
      expect(result.current).toBe((await readJournal()).at(-1)?.tag);
    } finally {
      await db.drop();
    }
  });
});
