// createRetrysafe with `mysql`: it refuses a MySQL database that is not migrated (naming the
// command) and closes nothing of Postgres it did not open; a mysql2 pool it is given stays open
// after stop(), a URI's pool is closed by it.
import { randomBytes, randomUUID } from 'node:crypto';
import mysql from 'mysql2/promise';
import { describe, expect, it } from 'vitest';
import { createRetrysafe } from '@retrysafe/store';
import { useTestDatabase } from '../helpers/database';
import { hasMariaDb, startMariaDb } from '../helpers/mariadb';
import { jsonResult, testPolicy } from '../helpers/store';

const responseKeys = `k1:${randomBytes(32).toString('base64')}`;

describe.skipIf(!hasMariaDb)('createRetrysafe({ mysql })', () => {
  const db = useTestDatabase();

  it('refuses an unmigrated MySQL database, then keeps keys there once migrated; a given pool outlives stop()', async () => {
    const server = await startMariaDb();
    try {
      const options = { connectionString: db.url, service: 'orders', fingerprintSecret: randomBytes(32), responseKeys, metricsFlushIntervalMs: 3_600_000 };
      await expect(createRetrysafe({ ...options, mysql: { uri: server.uri } })).rejects.toThrow(/npx retrysafe migrate --mysql/);
      const { migrateMysql } = await import('@retrysafe/store/mysql');
      await migrateMysql(server.uri);
      const pool = mysql.createPool({ uri: server.uri, connectionLimit: 2 });
      const retrysafe = await createRetrysafe({ ...options, mysql: { pool } });
      const principalId = randomUUID();
      const outcome = await retrysafe.store.execute({
        principalId,
        endpoint: 'POST /orders',
        method: 'POST',
        key: 'k',
        body: {},
        policy: testPolicy,
        mode: 'claim-first',
        work: () => Promise.resolve(jsonResult(201, { ok: true })),
      });
      expect(outcome.status).toBe(201);
      await retrysafe.stop();
      // The key is in MariaDB, not in Postgres.
      const [rows] = await pool.query<(mysql.RowDataPacket & { state: string })[]>('SELECT state FROM retrysafe_idempotency_keys WHERE principal_id = ?', [principalId]);
      expect(rows.map((row) => row.state)).toEqual(['completed']);
      const inPostgres = await db.pool.query('SELECT 1 FROM idempotency_keys WHERE principal_id = $1', [principalId]);
      expect(inPostgres.rowCount).toBe(0);
      await pool.end();
    } finally {
      await server.stop();
    }
  });
});
