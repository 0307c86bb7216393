// The MySQL/MariaDB backend's migrations: applied to a service's own database beside its tables,
// idempotently, by processes that may start at once (GET_LOCK), and through the package's CLI.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { describe, expect, it } from 'vitest';
import { checkMysqlSchema, migrateMysql, readMysqlMigrations } from '@retrysafe/store/mysql';
import { hasMariaDb, startMariaDb } from '../helpers/mariadb';

describe.skipIf(!hasMariaDb)('MySQL/MariaDB migrations', () => {
  it('apply once beside the service tables, concurrently without error, and the store refuses an unmigrated database', async () => {
    const server = await startMariaDb();
    try {
      const pool = server.pool(4);
      await pool.query('CREATE TABLE orders (id INT PRIMARY KEY)');
      await expect(checkMysqlSchema(pool)).rejects.toThrow(/retrysafe migrate --mysql/);
      const tags = (await readMysqlMigrations()).map((migration) => migration.tag);
      // Three processes' worth of migrators at once: one applies, the others find it applied.
      const results = await Promise.all([migrateMysql(server.uri), migrateMysql(server.uri), migrateMysql(server.uri)]);
      expect(results.flatMap((result) => result.applied).sort()).toEqual(tags);
      expect((await migrateMysql(pool)).applied).toEqual([]);
      await checkMysqlSchema(pool);
      const [tables] = await pool.query<(mysql.RowDataPacket & { name: string })[]>('SELECT table_name AS name FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY 1');
      expect(tables.map((row) => row.name)).toEqual(['orders', 'retrysafe_idempotency_keys', 'retrysafe_mysql_migrations', 'retrysafe_sweep_runs', 'retrysafe_sweep_run_scopes']);
      // The primary key is the scoped key; the sweep's and the stale claims' indexes exist, and the
      // dashboard's (0003: a principal's recent keys, stale claims by lease; 0004: a correlation id).
      const [indexes] = await pool.query<(mysql.RowDataPacket & { name: string; columns: string })[]>(
        "SELECT index_name AS name, GROUP_CONCAT(column_name ORDER BY seq_in_index) AS columns FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = 'retrysafe_idempotency_keys' GROUP BY index_name ORDER BY 1",
      );
      expect(indexes.map((row) => [row.name, row.columns])).toEqual([
        ['PRIMARY', 'principal_id,service,scope,idempotency_key'],
        ['retrysafe_idempotency_keys_correlation', 'correlation_id'],
        ['retrysafe_idempotency_keys_expires_at', 'expires_at'],
        ['retrysafe_idempotency_keys_principal_created', 'principal_id,created_at'],
        ['retrysafe_idempotency_keys_state_created', 'state,created_at'],
        ['retrysafe_idempotency_keys_state_lease', 'state,lease_expires_at'],
      ]);
    } finally {
      await server.stop();
    }
  });

  it('runs as `retrysafe migrate --mysql <uri>`, printing one JSON object', async () => {
    const server = await startMariaDb();
    try {
      const run = (args: string[]) =>
        spawnSync(process.execPath, ['--conditions=retrysafe-source', '--import', 'tsx', join(import.meta.dirname, '../../src/cli.ts'), ...args], { encoding: 'utf8', env: { ...process.env, DATABASE_URL: '' } });
      const first = run(['migrate', '--mysql', server.uri]);
      expect(first.stderr).toBe('');
      expect(first.status).toBe(0);
      const tags = (await readMysqlMigrations()).map((migration) => migration.tag);
      expect(JSON.parse(first.stdout)).toMatchObject({ applied: tags, current: tags.at(-1) });
      expect(JSON.parse(run(['migrate', '--mysql', server.uri]).stdout)).toMatchObject({ applied: [] });
      const bad = run(['migrate', '--mysql']);
      expect(bad.status).toBe(2);
      expect(bad.stderr).toMatch(/--mysql needs one mysql:\/\/ URI/);
    } finally {
      await server.stop();
    }
  });
});
