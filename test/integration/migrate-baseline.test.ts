// The store's migrations create the store alone (0028, a baseline standing for 0000-0027 less the
// dashboard's objects; 0029, service starts and an unaudited release), and the Retrysafe server's
// set owns operators, sessions and the sign-in throttle (its 0001) and the audit log (its 0002),
// and leaves instance starts to the store (its 0003). An install of today's schema (store
// 0000-0027, the server's 0000, rows in keys, operators, sessions, the throttle, the audit log and
// the instance starts) upgrades in place: its rows kept, its structure then equal to a fresh
// install's, in both layouts.
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyMigrations, migrate, migrationStatus, readMigrations, STORE_MIGRATIONS, type MigrationSet } from '@retrysafe/store/migrate';
import { DEMO_MIGRATIONS, SERVER_MIGRATIONS, migrateDatabase } from '../../db/migrate';
import { createTestDatabase, layouts } from '../helpers/database';
import { readSchemaCatalog } from '../helpers/schema-catalog';

const SERVER_TABLES = ['operators', 'operator_accounts', 'operator_sessions', 'operator_verifications', 'sign_in_throttle'];

let scratch: string;
/** A copy of a set's folder that stops after `last` (the release that shipped it). */
async function folderUpTo(folder: string, last: string, name: string): Promise<string> {
  const out = join(scratch, name);
  await mkdir(join(out, 'meta'), { recursive: true });
  const journal = JSON.parse(await readFile(join(folder, 'meta', '_journal.json'), 'utf8')) as { entries: { tag: string }[] };
  const end = journal.entries.findIndex((entry) => entry.tag === last);
  expect(end).toBeGreaterThanOrEqual(0);
  journal.entries = journal.entries.slice(0, end + 1);
  await writeFile(join(out, 'meta', '_journal.json'), JSON.stringify(journal));
  for (const entry of journal.entries) await copyFile(join(folder, `${entry.tag}.sql`), join(out, `${entry.tag}.sql`));
  return out;
}

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'retrysafe-baseline-'));
});
afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

const rowsOf = async (client: pg.Client, table: string) => (await client.query<{ row: string }>(`SELECT t::text AS row FROM ${table} t ORDER BY 1`)).rows.map((row) => row.row);

async function catalogOf(url: string) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return {
      store: await readSchemaCatalog(client, 'retrysafe', { exclude: { tables: ['migrations'] } }),
      server: await readSchemaCatalog(client, 'retrysafe_server', { exclude: { tables: ['migrations'] } }),
      demo: await readSchemaCatalog(client, 'retrysafe_demo', { exclude: { tables: ['migrations'] } }),
    };
  } finally {
    await client.end();
  }
}

describe.each(layouts)("upgrading today's schema (%s layout)", (layout) => {
  it('keeps the rows, moves the dashboard objects to retrysafe_server and ends equal to a fresh install', async () => {
    const old = await createTestDatabase({ empty: true });
    const fresh = await createTestDatabase({ empty: true });
    const client = new pg.Client({ connectionString: old.url });
    try {
      // Today's release: the store's 0000-0027, the demo's set, the server's 0000.
      const storeToday: MigrationSet = { ...STORE_MIGRATIONS, folder: await folderUpTo(STORE_MIGRATIONS.folder, '0027_redis_reconcile', `store-${layout}`) };
      const serverToday: MigrationSet = { ...SERVER_MIGRATIONS, folder: await folderUpTo(SERVER_MIGRATIONS.folder, '0000_server_events', `server-${layout}`) };
      await client.connect();
      await applyMigrations(client, storeToday, { settings: { 'retrysafe.store_layout': layout } });
      await applyMigrations(client, DEMO_MIGRATIONS);
      await applyMigrations(client, serverToday);
      await client.query(`INSERT INTO retrysafe.idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
        SELECT gen_random_uuid(), 'demo', 'POST /x', 'k' || i, 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), now(), now() + interval '1 day'
        FROM generate_series(1, 20) AS i`);
      await client.query(`INSERT INTO retrysafe.operators (id, name, email, role) VALUES ('op1', 'Ops', 'ops@example.com', 'admin');
        INSERT INTO retrysafe.operator_accounts (id, account_id, provider_id, user_id, password) VALUES ('acc1', 'op1', 'credential', 'op1', '$argon2id$v=19$m=19456,t=2,p=1$x$y');
        INSERT INTO retrysafe.operator_sessions (id, token, user_id, expires_at) VALUES ('s1', encode(sha256('token-1'::bytea), 'hex'), 'op1', now() + interval '1 hour');
        INSERT INTO retrysafe.sign_in_throttle (subject, failures, window_started_at) VALUES ('email:ops@example.com', 2, now());
        INSERT INTO retrysafe.audit_log (actor, action, target, reason) VALUES ('ops', 'test.before', '{}'::jsonb, 'before the upgrade');
        INSERT INTO retrysafe_server.instance_starts (started_at, service, instance, package_version) VALUES (now() - interval '1 hour', 'demo', 'host:41', '0.1.0')`);
      const before: Record<string, string[]> = {};
      for (const table of [...SERVER_TABLES, 'audit_log', 'idempotency_keys']) before[table] = await rowsOf(client, `retrysafe.${table}`);
      expect(before.operator_sessions).toHaveLength(1);
      // The new store knows this install is behind by the baseline (recorded, not run) and 0029.
      expect((await migrationStatus(client)).pending).toEqual(['0028_store_baseline', '0029_service_starts', '0030_key_usage_service', '0031_partitions_attached', '0032_sweep_evidence_past_expiry', '0033_short_promise_sweep']);

      const upgraded = await migrateDatabase(old.url, { layout });
      expect(upgraded.applied).toEqual(['0028_store_baseline', '0029_service_starts', '0030_key_usage_service', '0031_partitions_attached', '0032_sweep_evidence_past_expiry', '0033_short_promise_sweep', '0001_operators', '0002_audit_log', '0003_service_starts', '0004_kept_elsewhere_samples']);
      for (const table of [...SERVER_TABLES, 'audit_log']) {
        expect(await rowsOf(client, `retrysafe_server.${table}`)).toEqual(before[table]);
        expect((await client.query<{ found: string | null }>('SELECT to_regclass($1)::text AS found', [`retrysafe.${table}`])).rows[0]?.found).toBeNull();
      }
      expect(await rowsOf(client, 'retrysafe.idempotency_keys')).toEqual(before.idempotency_keys);
      // The server's instance starts are the store's service starts now.
      expect((await client.query('SELECT service, instance, package_version FROM retrysafe.service_starts')).rows).toEqual([{ service: 'demo', instance: 'host:41', package_version: '0.1.0' }]);
      expect((await client.query<{ found: string | null }>("SELECT to_regclass('retrysafe_server.instance_starts')::text AS found")).rows[0]?.found).toBeNull();
      // The moved functions find the moved tables.
      const me = await client.query<{ email: string }>("SELECT email FROM retrysafe_server.retrysafe_session_operator(encode(sha256('token-1'::bytea), 'hex'))");
      expect(me.rows).toEqual([{ email: 'ops@example.com' }]);
      await client.query("SELECT retrysafe_server.retrysafe_audit_sign_in_attempt('auth.sign_in_failed', 'ops@example.com', '{}', '{}', '127.0.0.1', 60)");
      // A stale claim's release and its one audit row (the store's function audits no more), in the moved log.
      const stale = (await client.query<{ principal_id: string }>("SELECT principal_id FROM retrysafe.idempotency_keys WHERE key = 'k1'")).rows[0]?.principal_id;
      const released = await client.query<{ released: boolean }>("SELECT retrysafe_server.retrysafe_release_stale_claim_audited($1, 'demo', 'POST /x', 'k1', 'ops', 'processor confirmed the failure') AS released", [stale]);
      expect(released.rows).toEqual([{ released: true }]);
      const actions = await client.query<{ action: string }>("SELECT action FROM retrysafe_server.audit_log WHERE action <> 'test.before' ORDER BY id");
      expect(actions.rows.map((row) => row.action)).toEqual(['auth.sign_in_failed', 'stale_claim.release']);
      await expect(client.query("UPDATE retrysafe_server.audit_log SET reason = 'x'")).rejects.toThrow(/append-only/);

      await migrateDatabase(fresh.url, { layout });
      const [upgradedCatalog, freshCatalog] = await Promise.all([catalogOf(old.url), catalogOf(fresh.url)]);
      expect(upgradedCatalog).toEqual(freshCatalog);
      expect(freshCatalog.server.tables.join('\n')).toMatch(/"retrysafe_server"."operator_sessions"/);
      // Both journals hold every tag once, and neither has anything pending.
      const journal = async (url: string) => {
        const db = new pg.Client({ connectionString: url });
        await db.connect();
        try {
          return { names: (await db.query<{ name: string }>('SELECT name FROM retrysafe.migrations ORDER BY name')).rows.map((row) => row.name), status: await migrationStatus(db) };
        } finally {
          await db.end();
        }
      };
      const [upgradedJournal, freshJournal] = await Promise.all([journal(old.url), journal(fresh.url)]);
      expect(upgradedJournal).toEqual(freshJournal);
      expect(freshJournal.names).toEqual((await readMigrations()).map((migration) => migration.tag).sort());
      expect(freshJournal.status).toEqual({ current: '0033_short_promise_sweep', latest: '0033_short_promise_sweep', pending: [] });
      // Migrating again changes nothing.
      expect((await migrateDatabase(old.url, { layout })).applied).toEqual([]);
    } finally {
      await client.end();
      await old.drop();
      await fresh.drop();
    }
  });
});

describe("the package's own migrate()", () => {
  it.each(layouts)('creates the store alone: no operator, session, sign-in, audit or server object (%s layout)', async (layout) => {
    const db = await createTestDatabase({ empty: true });
    const client = new pg.Client({ connectionString: db.url });
    try {
      expect((await migrate(db.url, { layout })).applied).toEqual(['0028_store_baseline', '0029_service_starts', '0030_key_usage_service', '0031_partitions_attached', '0032_sweep_evidence_past_expiry', '0033_short_promise_sweep']);
      await client.connect();
      const found = await client.query<{ name: string }>(
        `SELECT n.nspname || '.' || c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname LIKE 'retrysafe%' AND (c.relname ~ '(operator|session|sign_in|verification|audit|instance_starts)')
         UNION ALL SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname LIKE 'retrysafe%' AND p.proname ~ '(operator|session|sign_in|acting_admin|audit)'
         UNION ALL SELECT nspname::text FROM pg_namespace WHERE nspname IN ('retrysafe_server', 'retrysafe_demo')`,
      );
      expect(found.rows).toEqual([]);
      const keys = await client.query<{ kind: string }>("SELECT relkind::text AS kind FROM pg_class WHERE oid = 'retrysafe.idempotency_keys'::regclass");
      expect(keys.rows[0]?.kind).toBe(layout === 'partitioned' ? 'p' : 'r');
      expect((await client.query<{ version: number }>('SELECT retrysafe.retrysafe_store_schema_version() AS version')).rows[0]?.version).toBe(11);
      expect(await migrationStatus(client)).toEqual({ current: '0033_short_promise_sweep', latest: '0033_short_promise_sweep', pending: [] });
      // The release of a stale claim writes nothing but the key (there is no audit log here to write).
      await client.query(`INSERT INTO retrysafe.idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
        VALUES ('00000000-0000-0000-0000-000000000001', 'orders', 'POST /x', 'k', 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), now() - interval '1 minute', now() + interval '1 day')`);
      expect((await client.query("SELECT retrysafe.retrysafe_release_stale_claim('00000000-0000-0000-0000-000000000001', 'orders', 'POST /x', 'k', 'ops', 'why') AS released")).rows).toEqual([{ released: true }]);
      // An older @retrysafe/store (its folder ends at 0027, its migrator knows no baseline) finds nothing to run here.
      const older: MigrationSet = { ...STORE_MIGRATIONS, baseline: undefined, folder: await folderUpTo(STORE_MIGRATIONS.folder, '0027_redis_reconcile', `older-${layout}`) };
      expect((await applyMigrations(client, older, { settings: { 'retrysafe.store_layout': layout } })).applied).toEqual([]);
    } finally {
      await client.end();
      await db.drop();
    }
  });
});
