// The dashboard's lookup of a request by its correlation id for keys kept in MySQL/MariaDB
// (MysqlKeyReads.correlationRecords), as the dashboard's read-only user whose column privileges
// exclude response_body: the keys claimed with the id, metadata only, with their principal's name
// from Postgres; through the correlation index of mysql-migrations/0004 (EXPLAIN, on a young table
// and on one with rows and statistics), which a database migrated only to 0003 lacks: the store
// and the dashboard's start check both say so.
import { cp, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Pool, RowDataPacket } from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IdempotencyStore, namePrincipal, ResponseKeyRing, type IdempotencyBackend, type IdempotentCall } from '@retrysafe/store';
import {
  checkMysqlSchema,
  createMysqlPool,
  migrateMysql,
  MYSQL_MIGRATIONS_FOLDER,
  MysqlBackend,
  mysqlDashboardGrants,
  mysqlKeyReadStatementTexts,
  MysqlKeyReads,
  mysqlMissingDashboardIndexes,
} from '@retrysafe/store/mysql';
import { useTestDatabase } from '../helpers/database';
import { hasMariaDb, startMariaDb, useMariaDb } from '../helpers/mariadb';
import { jsonResult, newResponseKey, principal, TEST_SERVICE, testPolicy } from '../helpers/store';

const SENTINEL = 'SENTINEL-mysql-correlation-51b0';
const ENDPOINT = 'POST /orders';
const CORRELATION_INDEX = 'retrysafe_idempotency_keys_correlation';

describe.runIf(hasMariaDb)('the correlation-id lookup of MySQL-kept keys', () => {
  const db = useTestDatabase();
  const mariadb = useMariaDb();
  let owner: Pool;
  let reader: Pool;
  let store: IdempotencyStore;

  const call = (principalId: string, key: string, status = 201): IdempotentCall => ({
    principalId,
    key,
    endpoint: ENDPOINT,
    method: 'POST',
    body: { key },
    policy: testPolicy,
    mode: 'claim-first',
    work: () => Promise.resolve(jsonResult(status, { note: SENTINEL })),
  });

  beforeAll(async () => {
    owner = mariadb.server.pool(4);
    const password = 'reader-pw-0c2e';
    await mariadb.server.asRoot([`CREATE USER 'retrysafe_dashboard'@'127.0.0.1' IDENTIFIED BY '${password}'`, ...mysqlDashboardGrants({ user: 'retrysafe_dashboard', host: '127.0.0.1' }, 'service')]);
    reader = createMysqlPool(`mysql://retrysafe_dashboard:${password}@127.0.0.1:${mariadb.server.port}/service`, 2);
    // The backend's database type is mysql2's, not pg's: the store is built as for any service.
    store = new IdempotencyStore({ pool: db.pool, backend: new MysqlBackend(owner) as unknown as IdempotencyBackend, service: TEST_SERVICE, fingerprintSecret: Buffer.alloc(32, 5), keyRing: new ResponseKeyRing([newResponseKey()]) });
    await store.registerRoutePolicy(ENDPOINT, testPolicy, true);
  }, 120_000);
  afterAll(async () => {
    await reader.end();
  });

  it("finds the key a correlation id names, metadata only, with its principal's name, as the dashboard's user", async () => {
    const named = principal();
    const other = principal();
    await namePrincipal(db.pool, named, 'Acme Ltd');
    const first = await store.execute(call(named, 'order-1'));
    const replay = await store.execute(call(named, 'order-1'));
    const unrelated = await store.execute(call(other, 'order-1'));
    expect(replay.correlationId).toBe(first.correlationId);
    const reads = new MysqlKeyReads(reader, db.pool);
    const found = await reads.correlationRecords(first.correlationId);
    expect(found.map((record) => [record.principalId, record.principalName, record.service, record.scope, record.key, record.state, record.statusCode, record.storedAs, record.correlationId])).toEqual([
      [named, 'Acme Ltd', TEST_SERVICE, ENDPOINT, 'order-1', 'completed', 201, 'body', first.correlationId],
    ]);
    expect(found[0]?.fingerprintPrefix).toMatch(/^[0-9a-f]{8}$/);
    expect(JSON.stringify(found)).not.toContain(SENTINEL);
    expect((await reads.correlationRecords(unrelated.correlationId)).map((record) => [record.principalId, record.principalName])).toEqual([[other, null]]);
    expect(await reads.correlationRecords('00000000-0000-4000-8000-000000000000')).toEqual([]);
    // Its statement names no column outside the grant.
    for (const sql of mysqlKeyReadStatementTexts()) expect(sql).not.toMatch(/response_body|\*\s+FROM/i);
  });

  it('reads through the correlation index, on a young table and on one with rows and statistics', async () => {
    const plan = async () => {
      const sql = mysqlKeyReadStatementTexts().find((text) => text.includes(CORRELATION_INDEX)) ?? '';
      const [rows] = await reader.query<(RowDataPacket & { table: string | null; key: string | null; type: string | null; rows: number | string | null })[]>(`EXPLAIN ${sql}`, ['00000000-0000-4000-8000-000000000001']);
      return rows.filter((row) => row.table === 'retrysafe_idempotency_keys');
    };
    const young = await plan();
    expect(young.map((row) => [row.key, row.type])).toEqual([[CORRELATION_INDEX, 'ref']]);
    // 20,000 rows of distinct ids, then the table's statistics.
    const values: string[] = [];
    for (let i = 0; i < 20_000; i += 1) {
      values.push(`(UUID(), 'bulk', 'POST /bulk', 'k${i}', 'completed', REPEAT('a', 32), UUID(), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL 1 DAY, 201, 'application/json', 'k1', x'00')`);
    }
    for (let i = 0; i < values.length; i += 2_000) {
      await owner.query(
        `INSERT INTO retrysafe_idempotency_keys (principal_id, service, scope, idempotency_key, state, fingerprint, correlation_id, created_at, completed_at, expires_at, response_status, response_content_type, response_key_id, response_body) VALUES ${values.slice(i, i + 2_000).join(',')}`,
      );
    }
    await owner.query('ANALYZE TABLE retrysafe_idempotency_keys');
    const analysed = await plan();
    expect(analysed.map((row) => [row.key, row.type])).toEqual([[CORRELATION_INDEX, 'ref']]);
    expect(Number(analysed[0]?.rows)).toBeLessThan(10);
  }, 120_000);
});

describe.runIf(hasMariaDb)('a MySQL database without the correlation index (migrated to 0003 only)', () => {
  it('is refused by the store and by the dashboard, until `retrysafe migrate --mysql` applies 0004', async () => {
    const server = await startMariaDb();
    const folder = await mkdtemp(join(tmpdir(), 'retrysafe-mysql-migrations-'));
    const pool = server.pool(2);
    try {
      for (const file of (await readdir(MYSQL_MIGRATIONS_FOLDER)).filter((name) => name < '0004')) await cp(join(MYSQL_MIGRATIONS_FOLDER, file), join(folder, file));
      expect((await migrateMysql(server.uri, folder)).applied).toEqual(['0001_idempotency_keys', '0002_sweep_evidence', '0003_dashboard_reads']);
      await expect(checkMysqlSchema(pool)).rejects.toThrow(/missing 0004_correlation_lookup\): run npx retrysafe migrate --mysql/);
      expect(await mysqlMissingDashboardIndexes(pool)).toEqual([CORRELATION_INDEX]);
      expect((await migrateMysql(server.uri)).applied).toEqual(['0004_correlation_lookup']);
      await checkMysqlSchema(pool);
      expect(await mysqlMissingDashboardIndexes(pool)).toEqual([]);
    } finally {
      await rm(folder, { recursive: true, force: true });
      await server.stop();
    }
  }, 120_000);
});
