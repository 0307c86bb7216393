// Upgrading a store to the partial indexes of migration 0012, as docs/deploying.md's "Upgrading a
// large store" says: build them first (CONCURRENTLY on a live store), then migrate. 0011 then builds
// nothing, 0012 only drops the old indexes, and the rows stored before are served as before.
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { migrate } from '@retrysafe/store/migrate';
import { MIGRATIONS_FOLDER, migrateDatabase } from '../../db/migrate';
import { createTestDatabase, layouts } from '../helpers/database';

/** A copy of the migrations folder that ends at migration `last` (journal index). */
async function migrationsUpTo(last: number): Promise<string> {
  const folder = await mkdtemp(join(tmpdir(), 'retrysafe-migrations-'));
  await cp(MIGRATIONS_FOLDER, folder, { recursive: true });
  const journalPath = join(folder, 'meta', '_journal.json');
  const journal = JSON.parse(await readFile(journalPath, 'utf8')) as { entries: { idx: number }[] };
  journal.entries = journal.entries.filter((entry) => entry.idx <= last);
  await writeFile(journalPath, JSON.stringify(journal));
  return folder;
}

const indexesOf = async (client: pg.Client) =>
  (await client.query<{ name: string }>("SELECT indexrelid::regclass::text AS name FROM pg_index WHERE indrelid = 'idempotency_keys'::regclass ORDER BY 1")).rows.map((row) => row.name);

describe.each(layouts)('upgrading to the partial indexes (%s layout)', (layout) => {
  it('keeps indexes built beforehand, skips the 0011 build, drops the old ones and serves the old rows', async () => {
    const db = await createTestDatabase({ empty: true });
    const upTo10 = await migrationsUpTo(10);
    const client = new pg.Client({ connectionString: db.url });
    try {
      // The store as a release of then left it (its own migrator: the server's set of today moves
      // the operator tables, which that release's later migrations still expect in retrysafe).
      await migrate(db.url, { folder: upTo10, layout });
      await client.connect();
      await client.query(
        `INSERT INTO idempotency_keys (principal_id, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
         SELECT gen_random_uuid(), 'POST /x', 'k' || i, 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), now(), now() + interval '1 day'
         FROM generate_series(1, 50) AS i`,
      );
      // What docs/deploying.md tells a large store to run first (without CONCURRENTLY here: no traffic).
      await client.query(`CREATE INDEX idempotency_keys_expiry_idx ON idempotency_keys (expires_at) WHERE expires_at > '-infinity'::timestamptz;
        CREATE INDEX idempotency_keys_stale_lease_idx ON idempotency_keys (lease_expires_at) WHERE state = 'in_progress' AND lease_expires_at IS NOT NULL;
        CREATE INDEX idempotency_keys_principal_created_idx ON idempotency_keys (principal_id, created_at) WHERE created_at > '-infinity'::timestamptz`);
      const before = await client.query<{ oid: number }>("SELECT 'idempotency_keys_principal_created_idx'::regclass::oid AS oid");
      const result = await migrateDatabase(db.url, { layout });
      expect(result.applied).toContain('0011_principal_recent_keys');
      expect(result.applied).toContain('0012_request_path_plans');
      expect(await indexesOf(client)).toEqual([
        'idempotency_keys_correlation_idx', // 0018, the correlation-id lookup
        'idempotency_keys_expiry_idx',
        'idempotency_keys_pkey',
        'idempotency_keys_principal_created_idx',
        'idempotency_keys_stale_lease_idx',
      ]);
      // The index built beforehand is the one kept, not a rebuild.
      const after = await client.query<{ oid: number }>("SELECT 'idempotency_keys_principal_created_idx'::regclass::oid AS oid");
      expect(after.rows[0]?.oid).toBe(before.rows[0]?.oid);
      const { rows } = await client.query<{ n: number }>("SELECT count(*)::int AS n FROM idempotency_keys WHERE state = 'in_progress' AND lease_expires_at < now() + interval '1 minute'");
      expect(rows[0]?.n).toBe(50);
    } finally {
      await client.end();
      await rm(upTo10, { recursive: true, force: true });
      await db.drop();
    }
  });
});
