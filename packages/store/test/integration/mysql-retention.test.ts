// Retention on the MySQL/MariaDB key table: chunked deletes through the expiry index that never
// delete a row inside its window (a trigger refuses any deletion of a live row, as on Postgres),
// evidence per service and scope committed with each chunk, one sweeper at a time, and stale
// claims released so their retry runs at once.
import { randomUUID } from 'node:crypto';
import type { Pool, RowDataPacket } from 'mysql2/promise';
import { beforeAll, describe, expect, it } from 'vitest';
import { mysqlRetentionTexts, sweepMysql } from '@retrysafe/store/mysql';
import { createMysqlTestStore, hasMariaDb, useMariaDb } from '../helpers/mariadb';
import { jsonResult, principal, TEST_SERVICE, testPolicy } from '../helpers/store';

const SCOPE = 'POST /refunds';

describe.skipIf(!hasMariaDb)('MySQL retention', () => {
  const mariadb = useMariaDb();
  let pool: Pool;

  beforeAll(async () => {
    pool = mariadb.server.pool(6);
    // Any deletion of a row whose expires_at has not passed fails the sweep loudly.
    await pool.query(`CREATE TRIGGER refuse_live_delete BEFORE DELETE ON retrysafe_idempotency_keys FOR EACH ROW
      BEGIN
        IF OLD.expires_at >= UTC_TIMESTAMP(6) THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'deleted a live key'; END IF;
      END`);
  });

  /** `count` rows of one principal created `ageSeconds` ago that expire `expiresInSeconds` from now. */
  async function seed(count: number, ageSeconds: number, expiresInSeconds: number, options: { principalId?: string; service?: string; state?: 'completed' | 'in_progress'; leaseAgoSeconds?: number } = {}) {
    const principalId = options.principalId ?? principal();
    const state = options.state ?? 'completed';
    const rows = Array.from({ length: count }, (_, index) => [
      principalId,
      options.service ?? TEST_SERVICE,
      Buffer.from(SCOPE),
      Buffer.from(`k-${index}-${randomUUID().slice(0, 8)}`),
      state,
      Buffer.alloc(32, 0xab),
      randomUUID(),
      state === 'completed' ? 201 : null,
      state === 'completed' ? 'application/json' : null,
      state === 'completed' ? Buffer.from([0]) : null,
      state === 'completed' ? 'k1' : null,
      state === 'completed' ? 0 : null,
      state === 'in_progress' ? -(options.leaseAgoSeconds ?? 3_600) : null,
      ageSeconds,
      expiresInSeconds,
    ]);
    await pool.query(
      `INSERT INTO retrysafe_idempotency_keys (principal_id, service, scope, idempotency_key, state, fingerprint, correlation_id, response_status,
         response_content_type, response_body, response_key_id, completed_at, lease_expires_at, created_at, expires_at)
       VALUES ${rows
         .map(
           () => `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
             IF(? IS NULL, NULL, UTC_TIMESTAMP(6)), UTC_TIMESTAMP(6) + INTERVAL ? SECOND,
             UTC_TIMESTAMP(6) - INTERVAL ? SECOND, UTC_TIMESTAMP(6) + INTERVAL ? SECOND)`,
         )
         .join(', ')}`,
      rows.flat(),
    );
    return principalId;
  }

  const countOf = async (principalId: string) => {
    const [rows] = await pool.query<(RowDataPacket & { n: number })[]>('SELECT COUNT(*) AS n FROM retrysafe_idempotency_keys WHERE principal_id = ?', [principalId]);
    return rows[0]?.n;
  };

  it('has a guard that would catch a live deletion (the trigger works)', async () => {
    const p = await seed(1, 10, 3_600);
    await expect(pool.query('DELETE FROM retrysafe_idempotency_keys WHERE principal_id = ?', [p])).rejects.toThrow(/deleted a live key/);
  });

  it('finds the chunk through the expiry index and stale claims through (state, created_at)', async () => {
    const [chunk] = await pool.query<(RowDataPacket & { key: string | null })[]>(`EXPLAIN ${mysqlRetentionTexts.chunk.replace(' FOR UPDATE SKIP LOCKED', '')}`, [500]);
    expect(chunk[0]?.key).toBe('retrysafe_idempotency_keys_expires_at');
    const [stale] = await pool.query<(RowDataPacket & { key: string | null })[]>(`EXPLAIN ${mysqlRetentionTexts.stale.replace(' FOR UPDATE SKIP LOCKED', '')}`, [0, 500]);
    expect(stale[0]?.key).toBe('retrysafe_idempotency_keys_state_created');
  });

  it('deletes expired rows only, in chunks, and records the run and its evidence per service and scope', async () => {
    const expired = await seed(250, 7_300, -100);
    const orders = await seed(40, 1_300, -50, { service: 'orders' });
    // Live, a minute from expiry: the trigger would refuse their deletion.
    const live = await seed(60, 7_000, 60);
    const result = await sweepMysql(pool, { chunkSize: 100, minPauseMs: 1, retryWindowSeconds: (service) => (service === 'orders' ? 600 : 3_600) });
    expect(result.error).toBeUndefined();
    expect([result.status, result.stopReason]).toEqual(['completed', 'caught-up']);
    expect(result.rowsDeleted).toBe(290);
    expect(result.chunks).toBe(3);
    expect([await countOf(expired), await countOf(orders), await countOf(live)]).toEqual([0, 0, 60]);
    const byService = Object.fromEntries(result.scopes.map((scope) => [scope.service, scope]));
    expect(byService[TEST_SERVICE]).toMatchObject({ scope: SCOPE, rowsDeleted: 250, retryWindowSeconds: 3_600 });
    expect(byService[TEST_SERVICE]?.minAgeSeconds).toBeGreaterThanOrEqual(7_300);
    expect(byService.orders).toMatchObject({ rowsDeleted: 40, retryWindowSeconds: 600 });
    expect(byService.orders?.minMarginSeconds).toBeGreaterThanOrEqual(700);
    // The evidence committed with the chunks, in the same database.
    const [runs] = await pool.query<(RowDataPacket & { status: string; chunks: number; rows_deleted: number })[]>('SELECT status, chunks, rows_deleted FROM retrysafe_sweep_runs WHERE id = ?', [result.runId]);
    expect(runs.map((run) => [run.status, run.chunks, run.rows_deleted])).toEqual([['completed', 3, 290]]);
    const [scopes] = await pool.query<(RowDataPacket & { service: string; rows_deleted: number; min_age_seconds: number })[]>(
      'SELECT service, rows_deleted, min_age_seconds FROM retrysafe_sweep_run_scopes WHERE run_id = ? ORDER BY service',
      [result.runId],
    );
    expect(scopes.map((row) => [row.service, row.rows_deleted])).toEqual([[TEST_SERVICE, 250], ['orders', 40]].sort((a, b) => String(a[0]).localeCompare(String(b[0]))));
    expect(Math.min(...scopes.map((row) => row.min_age_seconds))).toBeGreaterThanOrEqual(1_300);
  });

  it('stops at its row budget and lets one sweeper run at a time', async () => {
    const p = await seed(120, 100, -10);
    const [first, second] = await Promise.all([sweepMysql(pool, { chunkSize: 50, maxRowsPerRun: 50, minPauseMs: 300 }), sweepMysql(pool, { chunkSize: 50, maxRowsPerRun: 50 })]);
    const statuses = [first.stopReason, second.stopReason].sort();
    expect(statuses).toEqual(['another-sweeper-running', 'row-budget']);
    expect(await countOf(p)).toBe(70);
    const rest = await sweepMysql(pool, { chunkSize: 50, minPauseMs: 1 });
    expect(rest.rowsDeleted).toBe(70);
    expect(await countOf(p)).toBe(0);
  });

  it('releases stale claims past their grace, not those within it, and their retry then runs at once', async () => {
    const { store } = createMysqlTestStore(pool);
    const p = principal();
    // A claim of the test store's own (its fingerprint), crashed an hour ago: past a 15-minute grace.
    const crashed = await store.begin({ principalId: p, key: 'k', endpoint: SCOPE, method: 'POST', body: { amount: 1 }, policy: { ...testPolicy, leaseMs: 100 } });
    expect(crashed.claimed).toBe(true);
    await pool.query('UPDATE retrysafe_idempotency_keys SET lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 HOUR WHERE principal_id = ?', [p]);
    // Another whose lease ended a minute ago: within the grace, left as it is.
    const recent = await seed(1, 120, 3_600, { state: 'in_progress', leaseAgoSeconds: 60 });
    const result = await sweepMysql(pool, { minPauseMs: 1 });
    expect(result.staleReleased).toBe(1);
    const [rows] = await pool.query<(RowDataPacket & { principal_id: string; state: string })[]>(
      'SELECT principal_id, state FROM retrysafe_idempotency_keys WHERE principal_id IN (?, ?) ORDER BY principal_id = ? DESC',
      [p, recent, p],
    );
    expect(rows.map((row) => row.state)).toEqual(['failed', 'in_progress']);
    const retried = await store.execute({ principalId: p, key: 'k', endpoint: SCOPE, method: 'POST', body: { amount: 1 }, policy: testPolicy, mode: 'claim-first', work: () => Promise.resolve(jsonResult(201, { ok: true })) });
    expect(retried.replayed).toBe(false);
  });
});
