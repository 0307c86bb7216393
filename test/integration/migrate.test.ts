import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { migrateDatabase, migrationStatus, readJournal } from '../../db/migrate';
import { createTestDatabase } from '../helpers/database';

describe('migrateDatabase', () => {
  it('lets several processes migrate one empty database at once', async () => {
    const db = await createTestDatabase({ empty: true });
    try {
      const results = await Promise.all([migrateDatabase(db.url), migrateDatabase(db.url), migrateDatabase(db.url)]);
      const journal = await readJournal();
      // Exactly one of them did the work; the others found it done.
      expect(results.map((result) => result.applied.length).sort()).toEqual([0, 0, journal.length]);
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      const status = await migrationStatus(client);
      const { rows } = await client.query<{ n: string }>('SELECT count(*) AS n FROM drizzle.__drizzle_migrations');
      await client.end();
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
