// Retention on the MySQL/MariaDB key table: the sweep deletes keys past their expires_at through
// the (expires_at) index, in bounded chunks, each its own short transaction (rows another
// transaction holds are skipped: FOR UPDATE SKIP LOCKED, MariaDB 10.6+ and MySQL 8), paced against
// live traffic, stopping at the first short chunk (caught up) or at the run's row budget. One
// sweeper at a time (GET_LOCK). Each chunk's evidence (per service and scope: rows, the youngest
// deleted row's age, the documented window and the margin) commits in the chunk's transaction, in
// retrysafe_sweep_runs / retrysafe_sweep_run_scopes (mysql-migrations/0002). Stale claims (in
// progress, lease ended longer than a grace ago) are released (failed, retryable) through the
// (state, created_at) index.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Pool, PoolConnection, ResultSetHeader, RowDataPacket } from 'mysql2/promise';
import { MYSQL_KEY_TABLE } from './mysql-statements.js';

const SWEEP_LOCK = 'retrysafe_mysql_sweep';

export interface MysqlSweepOptions {
  /** Rows per chunk (one short transaction each). */
  chunkSize: number;
  /** Pause after each chunk, as a multiple of the chunk's own duration. */
  pauseFactor: number;
  /** Pause after each chunk at least this long. */
  minPauseMs: number;
  /** At most this many rows per run; the next run continues. */
  maxRowsPerRun: number;
  /** A chunk's statements wait at most this long for a lock (whole seconds on MySQL; SKIP LOCKED means they rarely wait). */
  lockTimeoutMs: number;
  /** Stale claims are released once their lease ended this long ago. */
  staleGraceMs: number;
  /** The documented retry window of a service's scope, for the evidence's margin (null: unknown). */
  retryWindowSeconds?: (service: string, scope: string) => number | null;
}

/** The Postgres sweeper's defaults (server/retention/sweeper.ts), measured there. */
export const defaultMysqlSweepOptions: MysqlSweepOptions = {
  chunkSize: 500,
  pauseFactor: 3,
  minPauseMs: 20,
  maxRowsPerRun: 1_000_000,
  lockTimeoutMs: 1_000,
  staleGraceMs: 15 * 60_000,
};

export interface MysqlScopeEvidence {
  service: string;
  scope: string;
  rowsDeleted: number;
  /** The youngest deleted row's age when it was deleted. */
  minAgeSeconds: number;
  retryWindowSeconds: number | null;
  /** minAge - window: never negative unless a window was lengthened after its keys were claimed. */
  minMarginSeconds: number | null;
}

export interface MysqlSweepResult {
  status: 'completed' | 'failed' | 'skipped';
  runId: number | null;
  chunks: number;
  rowsDeleted: number;
  staleReleased: number;
  stopReason: 'caught-up' | 'row-budget' | 'another-sweeper-running' | 'error';
  scopes: MysqlScopeEvidence[];
  error?: string;
}

interface DoomedRow extends RowDataPacket {
  principal_id: string;
  service: string;
  scope: Buffer;
  idempotency_key: Buffer;
  age_seconds: string | number;
}

// FORCE INDEX: the expiry index whatever the statistics say (a young table's would pick a scan).
const CHUNK_SELECT_SQL = `SELECT principal_id, service, scope, idempotency_key,
  TIMESTAMPDIFF(MICROSECOND, created_at, UTC_TIMESTAMP(6)) / 1000000 AS age_seconds
  FROM ${MYSQL_KEY_TABLE} FORCE INDEX (retrysafe_idempotency_keys_expires_at)
  WHERE expires_at < UTC_TIMESTAMP(6) ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED`;

const STALE_SELECT_SQL = `SELECT principal_id, service, scope, idempotency_key
  FROM ${MYSQL_KEY_TABLE} FORCE INDEX (retrysafe_idempotency_keys_state_created)
  WHERE state = 'in_progress' AND lease_expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
  ORDER BY created_at LIMIT ? FOR UPDATE SKIP LOCKED`;

/** The statement texts, for the test that proves which index serves them. */
export const mysqlRetentionTexts = { chunk: CHUNK_SELECT_SQL, stale: STALE_SELECT_SQL };

type KeyRow = Pick<DoomedRow, 'principal_id' | 'service' | 'scope' | 'idempotency_key'>;

/** `(pk) IN ((...), ...)` with its values, for rows the transaction has locked. */
function byKeys(rows: KeyRow[]): { sql: string; values: (string | Buffer)[] } {
  return {
    sql: `(principal_id, service, scope, idempotency_key) IN (${rows.map(() => '(?, ?, ?, ?)').join(', ')})`,
    values: rows.flatMap((row) => [row.principal_id, row.service, row.scope, row.idempotency_key]),
  };
}

async function inTransaction<T>(connection: PoolConnection, lockTimeoutMs: number, body: () => Promise<T>): Promise<T> {
  await connection.query(`SET SESSION innodb_lock_wait_timeout = ${Math.max(1, Math.ceil(lockTimeoutMs / 1000))}`);
  await connection.query('START TRANSACTION');
  try {
    const result = await body();
    await connection.query('COMMIT');
    return result;
  } catch (error) {
    await connection.query('ROLLBACK').catch(() => undefined);
    throw error;
  }
}

/**
 * One chunk: the oldest expired rows by the expiry index, locked without waiting, deleted by
 * primary key (re-checked against expires_at), and their evidence added to run `runId`, all in one
 * transaction. Returns the rows deleted per (service, scope).
 */
async function sweepChunk(connection: PoolConnection, runId: number, options: MysqlSweepOptions): Promise<MysqlScopeEvidence[]> {
  return inTransaction(connection, options.lockTimeoutMs, async () => {
    const [rows] = await connection.query<DoomedRow[]>(CHUNK_SELECT_SQL, [options.chunkSize]);
    if (rows.length === 0) return [];
    const keys = byKeys(rows);
    const [deleted] = await connection.query<ResultSetHeader>(`DELETE FROM ${MYSQL_KEY_TABLE} WHERE ${keys.sql} AND expires_at < UTC_TIMESTAMP(6)`, keys.values);
    // Locked by this transaction: what was selected is what was deleted.
    if (deleted.affectedRows !== rows.length) throw new Error(`sweep chunk deleted ${deleted.affectedRows} of ${rows.length} locked rows`);
    const evidence = new Map<string, MysqlScopeEvidence>();
    for (const row of rows) {
      const scope = row.scope.toString('utf8');
      const age = Number(row.age_seconds);
      const id = `${row.service}\u0000${scope}`;
      const entry = evidence.get(id);
      if (entry) {
        entry.rowsDeleted += 1;
        entry.minAgeSeconds = Math.min(entry.minAgeSeconds, age);
      } else {
        evidence.set(id, { service: row.service, scope, rowsDeleted: 1, minAgeSeconds: age, retryWindowSeconds: null, minMarginSeconds: null });
      }
    }
    const scopes = [...evidence.values()];
    for (const entry of scopes) {
      entry.retryWindowSeconds = options.retryWindowSeconds?.(entry.service, entry.scope) ?? null;
      entry.minMarginSeconds = entry.retryWindowSeconds === null ? null : entry.minAgeSeconds - entry.retryWindowSeconds;
    }
    await connection.query(
      `INSERT INTO retrysafe_sweep_run_scopes (run_id, service, scope, rows_deleted, min_age_seconds, retry_window_seconds, min_margin_seconds)
       VALUES ${scopes.map(() => '(?, ?, ?, ?, ?, ?, ?)').join(', ')}
       ON DUPLICATE KEY UPDATE rows_deleted = rows_deleted + VALUES(rows_deleted), min_age_seconds = LEAST(min_age_seconds, VALUES(min_age_seconds)),
         retry_window_seconds = VALUES(retry_window_seconds), min_margin_seconds = LEAST(min_margin_seconds, VALUES(min_margin_seconds))`,
      scopes.flatMap((entry) => [runId, entry.service, Buffer.from(entry.scope, 'utf8'), entry.rowsDeleted, entry.minAgeSeconds, entry.retryWindowSeconds, entry.minMarginSeconds]),
    );
    await connection.query('UPDATE retrysafe_sweep_runs SET chunks = chunks + 1, rows_deleted = rows_deleted + ? WHERE id = ?', [rows.length, runId]);
    return scopes;
  });
}

/** Releases up to `limit` claims whose lease ended more than `graceMs` ago (failed, retryable), oldest first, skipping rows another transaction holds. */
export async function releaseMysqlStaleClaims(db: Pool | PoolConnection, limit: number, graceMs: number, lockTimeoutMs = 1_000): Promise<number> {
  const connection = 'getConnection' in db ? await db.getConnection() : db;
  try {
    return await inTransaction(connection, lockTimeoutMs, async () => {
      const [rows] = await connection.query<(RowDataPacket & KeyRow)[]>(STALE_SELECT_SQL, [Math.round(graceMs) * 1000, limit]);
      if (rows.length === 0) return 0;
      const keys = byKeys(rows);
      const [released] = await connection.query<ResultSetHeader>(
        `UPDATE ${MYSQL_KEY_TABLE} SET state = 'failed', lease_expires_at = NULL WHERE ${keys.sql} AND state = 'in_progress'`,
        keys.values,
      );
      return released.affectedRows;
    });
  } finally {
    if (connection !== db) connection.release();
  }
}

/**
 * One sweep run: stale claims released, then expired keys deleted chunk by chunk until caught up
 * or the row budget is spent, recorded with its evidence. Skipped while another sweeper runs.
 */
export async function sweepMysql(pool: Pool, overrides: Partial<MysqlSweepOptions> = {}): Promise<MysqlSweepResult> {
  const options = { ...defaultMysqlSweepOptions, ...overrides };
  const connection = await pool.getConnection();
  let broken: Error | undefined;
  try {
    const [locked] = await connection.query<(RowDataPacket & { got: number | null })[]>('SELECT GET_LOCK(?, 0) AS got', [SWEEP_LOCK]);
    if (locked[0]?.got !== 1) return { status: 'skipped', runId: null, chunks: 0, rowsDeleted: 0, staleReleased: 0, stopReason: 'another-sweeper-running', scopes: [] };
    try {
      // Holding the lock: a run still 'running' was left by a sweeper that stopped mid-run.
      await connection.query(
        "UPDATE retrysafe_sweep_runs SET status = 'failed', stop_reason = 'error', error = 'interrupted: the sweeper stopped before finishing this run; what it deleted up to then is recorded', finished_at = UTC_TIMESTAMP(6) WHERE status = 'running'",
      );
      const [created] = await connection.query<ResultSetHeader>("INSERT INTO retrysafe_sweep_runs (started_at, status) VALUES (UTC_TIMESTAMP(6), 'running')");
      const runId = created.insertId;
      const result: MysqlSweepResult = { status: 'completed', runId, chunks: 0, rowsDeleted: 0, staleReleased: 0, stopReason: 'caught-up', scopes: [] };
      const scopes = new Map<string, MysqlScopeEvidence>();
      try {
        result.staleReleased = await releaseMysqlStaleClaims(connection, options.chunkSize, options.staleGraceMs, options.lockTimeoutMs);
        for (;;) {
          const started = performance.now();
          const chunk = await sweepChunk(connection, runId, options);
          const rows = chunk.reduce((sum, entry) => sum + entry.rowsDeleted, 0);
          if (rows > 0) result.chunks += 1;
          result.rowsDeleted += rows;
          for (const entry of chunk) {
            const id = `${entry.service}\u0000${entry.scope}`;
            const seen = scopes.get(id);
            if (!seen) scopes.set(id, { ...entry });
            else {
              seen.rowsDeleted += entry.rowsDeleted;
              seen.minAgeSeconds = Math.min(seen.minAgeSeconds, entry.minAgeSeconds);
              seen.minMarginSeconds = seen.minMarginSeconds === null || entry.minMarginSeconds === null ? null : Math.min(seen.minMarginSeconds, entry.minMarginSeconds);
            }
          }
          if (rows < options.chunkSize) break;
          if (result.rowsDeleted >= options.maxRowsPerRun) {
            result.stopReason = 'row-budget';
            break;
          }
          await sleep(Math.max(options.minPauseMs, (performance.now() - started) * options.pauseFactor));
        }
      } catch (error) {
        result.status = 'failed';
        result.stopReason = 'error';
        result.error = error instanceof Error ? error.message : String(error);
      }
      result.scopes = [...scopes.values()];
      await connection.query('UPDATE retrysafe_sweep_runs SET status = ?, stop_reason = ?, error = ?, stale_released = ?, finished_at = UTC_TIMESTAMP(6) WHERE id = ?', [
        result.status,
        result.stopReason,
        result.error ?? null,
        result.staleReleased,
        runId,
      ]);
      return result;
    } finally {
      await connection.query('SELECT RELEASE_LOCK(?)', [SWEEP_LOCK]);
    }
  } catch (error) {
    broken = error as Error;
    throw error;
  } finally {
    if (broken) connection.destroy();
    else connection.release();
  }
}
