// The sweeper: deletes keys past their expires_at through the expires_at index, in
// bounded chunks, each its own short transaction (lock_timeout, SKIP LOCKED so in-flight
// work is never waited on), paced against live traffic, and stops a run at the first
// short chunk (it has caught up; looping to zero would keep walking the dead index
// entries at the low end of the index). In the partitioned layout it drops the partitions
// whose range has ended instead, and deletes only the keys promised less than a partition's
// width, by a walk of the expiry index (sweepShortPromises). One sweeper at a time across all instances
// (a session advisory lock). Every run is recorded with its evidence for compliance:
// per scope, the youngest deleted row's age at deletion against the documented window.
// The evidence commits with what it describes: each chunk's rows and their ages are added to
// its run's record in the chunk's own transaction (each dropped partition's right after its
// drop, and released stale claims right after their release), so a sweeper killed mid-run
// leaves a record of everything it deleted; the next run, holding the lock, closes such a
// run as failed ("interrupted").
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import { periodicTask, type PeriodicTask } from '@retrysafe/store';
import { detectStoreLayout } from '../../db/migrate';
import { beginWithLockTimeout, transactionOn, type HeldConnection } from '../../db/transaction';
import { EXPIRY_INDEX_PREDICATE } from '@retrysafe/store/index-predicates';
import { DetachWaiting, dropExpiredPartitions, ensurePartitions, listPartitions, PARTITION_SECONDS, SHORT_POLICY_CONDITION } from './partitions';
import { releaseStaleClaims } from './stale-claims';

/** pg_advisory_lock key of the sweeper: the bytes of "rssweep" as an integer. */
const SWEEPER_LOCK_KEY = 0x72737377656570n;

export interface SweepOptions {
  /** Rows per chunk (one short transaction each). */
  chunkSize: number;
  /** Pause after each chunk, as a multiple of the chunk's own duration (1 = 50% duty cycle at most). */
  pauseFactor: number;
  /** Pause after each chunk at least this long. */
  minPauseMs: number;
  /** At most this many rows per run; the next run continues. */
  maxRowsPerRun: number;
  /** A chunk waits at most this long for a lock before giving up (then the run stops). */
  lockTimeoutMs: number;
  /** Stale claims are released once their lease ended this long ago (operators see them before). */
  staleGraceMs: number;
  /** The partitioned layout: a partition's detach waits at most this long for older transactions (then the run records why and goes on). */
  detachTimeoutMs: number;
}

// Measured here (npm run bench -- sweeper, 8 clients claiming throughout): 1,000-row chunks
// at a 50% duty cycle raised claim p99 1.7x; 500-row chunks at 25% keep it near 1.3x and
// still delete ~17,000 rows/s, far above the steady-state expiry rate of a busy API.
export const defaultSweepOptions: SweepOptions = {
  chunkSize: 500,
  pauseFactor: 3,
  minPauseMs: 20,
  maxRowsPerRun: 1_000_000,
  lockTimeoutMs: 200,
  staleGraceMs: 15 * 60_000,
  detachTimeoutMs: 60_000,
};

export interface ScopeEvidence {
  service: string;
  scope: string;
  rowsDeleted: number;
  /** The youngest deleted row's age when it was deleted. */
  minAgeSeconds: number;
  /** The documented window in force at the sweep (the longest, for intent scope). */
  retryWindowSeconds: number | null;
  /** minAge - window: never negative unless a window was lengthened after keys were claimed. */
  minMarginSeconds: number | null;
  /** The longest a deleted row had been past its expiry: how late the cleanup came (null: a run before store migration 0032). */
  maxPastExpirySeconds: number | null;
}

export interface SweepResult {
  status: 'completed' | 'failed' | 'skipped';
  runId: number | null;
  trigger: 'schedule' | 'manual';
  chunks: number;
  rowsDeleted: number;
  staleReleased: number;
  /** Live-key quota counter buckets older than any retention, removed at the end of the run. */
  quotaBucketsDeleted: number;
  /** Traced attempts and key counts (migration 0025) past their key's expiry, removed at the end of the run. */
  attemptsDeleted: number;
  /** Unrecorded completions (migration 0026) past their key's retention, removed at the end of the run. */
  unrecordedDeleted: number;
  /** The Redis reconciler's findings (migration 0027) past their key's retention, removed at the end of the run. */
  findingsDeleted: number;
  /** Partitioned layout: day partitions created ahead, and dropped whole (their rows included in rowsDeleted). */
  partitionsCreated: number;
  partitionsDropped: string[];
  longestChunkMs: number;
  stopReason: 'caught-up' | 'row-budget' | 'another-sweeper-running' | 'error';
  scopes: ScopeEvidence[];
  error?: string;
}

interface ChunkRow {
  service: string;
  scope: string;
  rows: number;
  min_age_seconds: number;
  max_past_expiry_seconds: number;
}

const SWEEP_CHUNK_SQL = `WITH doomed AS (
               SELECT ctid FROM idempotency_keys
               WHERE expires_at < now() AND ${EXPIRY_INDEX_PREDICATE}
               ORDER BY expires_at
               LIMIT $1
               FOR UPDATE SKIP LOCKED
             ), deleted AS (
               DELETE FROM idempotency_keys k USING doomed
               WHERE k.ctid = doomed.ctid AND k.expires_at < now()
               RETURNING k.service, k.scope, k.created_at, k.expires_at
             )
             SELECT service, scope, count(*)::int AS rows, extract(epoch FROM now() - max(created_at))::float8 AS min_age_seconds,
                    extract(epoch FROM now() - min(expires_at))::float8 AS max_past_expiry_seconds
             FROM deleted GROUP BY service, scope`;

/** The chunk statement's text, for the test that proves its plan. */
export const sweepChunkText = SWEEP_CHUNK_SQL;

// The partitioned layout's walk of short promises. Its rows expire inside a partition that has
// not ended, among the rows promised a day or more, which expired there too and leave with the
// partition: deleting those would spend the WAL the drop spares. So a chunk walks the next
// `$1` entries of the expiry index after the last walk's end (`$2`), an index-only range that
// costs the same whatever it holds, and deletes the rows among them promised less than `$3`
// seconds (all of them up to the walk's last expiry: ties there included) by the same range.
// The next chunk starts after that expiry, so each entry is walked once. The delete cannot skip a
// locked row as the plain layout's chunk does (a row lock is rare here: a transactional request
// that began before its key expired); a chunk that would wait gives up at the lock timeout and
// ends the walk for this run, its cursor unmoved, so the next run deletes the row. A row whose
// claim commits after the walk has passed its expiry (a transactional claim open longer than its
// retention) is not walked again: it leaves with its partition.
const SHORT_WALK_SQL = `SELECT max(expires_at)::text AS upto, count(*)::int AS walked FROM (
               SELECT expires_at FROM idempotency_keys
               WHERE expires_at > $2 AND expires_at < now() AND ${EXPIRY_INDEX_PREDICATE}
               ORDER BY expires_at
               LIMIT $1
             ) walk`;
const SHORT_SWEEP_CHUNK_SQL = `WITH deleted AS (
               DELETE FROM idempotency_keys
               WHERE expires_at > $1 AND expires_at <= $2 AND expires_at < now() AND ${EXPIRY_INDEX_PREDICATE}
                 AND expires_at - created_at < $3 * interval '1 second'
               RETURNING service, scope, created_at, expires_at
             )
             SELECT service, scope, count(*)::int AS rows, extract(epoch FROM now() - max(created_at))::float8 AS min_age_seconds,
                    extract(epoch FROM now() - min(expires_at))::float8 AS max_past_expiry_seconds
             FROM deleted GROUP BY service, scope`;
/** Where the last walk ended: the latest run that walked (sweep_runs_swept_through_idx). */
const SHORT_WALK_CURSOR_SQL = `SELECT swept_through::text AS at, swept_through FROM sweep_runs WHERE swept_through IS NOT NULL ORDER BY id DESC LIMIT 1`;
/** Whether any policy promises less than a partition's width: else nothing to walk for. */
const SHORT_POLICY_SQL = `SELECT ${SHORT_POLICY_CONDITION} AS short`;

/** The walk's statements, for the tests that prove their plans. */
export const shortSweepTexts = { walk: SHORT_WALK_SQL, chunk: SHORT_SWEEP_CHUNK_SQL, cursor: SHORT_WALK_CURSOR_SQL, shortPolicy: SHORT_POLICY_SQL };

/** A chunk's deleted rows per scope, as its run's evidence takes them. */
function chunkEvidence(rows: ChunkRow[]): Parameters<typeof addRunEvidence>[2] {
  return rows.map((row) => ({ service: row.service, scope: row.scope, rows: row.rows, minAge: row.min_age_seconds, maxPastExpiry: row.max_past_expiry_seconds }));
}

/**
 * One chunk: the oldest expired rows by the expires_at index, locked without waiting
 * (SKIP LOCKED), deleted by their ctid, re-checked against expires_at, summarised per scope.
 */
async function sweepChunk(held: HeldConnection, runId: number, chunkSize: number, lockTimeoutMs: number): Promise<ChunkRow[]> {
  return transactionOn(
    held,
    async (db) => {
      const { rows } = await db.query<ChunkRow>({ name: 'retention_sweep_chunk', text: SWEEP_CHUNK_SQL, values: [chunkSize] });
      await addRunEvidence(db, runId, chunkEvidence(rows), 1);
      return rows;
    },
    beginWithLockTimeout(lockTimeoutMs),
  );
}

/**
 * Adds deleted rows to the run's record: per (service, scope) the count and the youngest age,
 * with the documented window in force (the longest of a service's intent policies for the
 * intent scope) and the margin, and the longest a row had been past its expiry; and the run's
 * totals. Both by primary key.
 */
async function addRunEvidence(
  db: Pick<pg.ClientBase, 'query'>,
  runId: number,
  deleted: { service: string; scope: string; rows: number; minAge: number; maxPastExpiry: number }[],
  chunks: number,
): Promise<void> {
  if (deleted.length > 0) {
    await db.query({
      name: 'retention_sweep_evidence',
      text: `WITH evidence AS (
               SELECT * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::float8[], $6::float8[]) AS e(service, scope, rows_deleted, min_age_seconds, max_past_expiry_seconds)
             ), windows AS (
               SELECT e.service, e.scope,
                      CASE WHEN e.scope = 'intent'
                           THEN (SELECT max(retry_window_seconds) FROM endpoint_policies p WHERE p.service = e.service AND p.scope_mode = 'intent')
                           ELSE (SELECT retry_window_seconds FROM endpoint_policies p WHERE p.service = e.service AND p.endpoint = e.scope) END AS retry_window_seconds
               FROM evidence e
             )
             INSERT INTO sweep_run_scopes AS s (run_id, service, scope, rows_deleted, min_age_seconds, retry_window_seconds, min_margin_seconds, max_past_expiry_seconds)
             SELECT $1, e.service, e.scope, e.rows_deleted, e.min_age_seconds, w.retry_window_seconds, e.min_age_seconds - w.retry_window_seconds, e.max_past_expiry_seconds
             FROM evidence e JOIN windows w USING (service, scope)
             ON CONFLICT (run_id, service, scope) DO UPDATE SET
               rows_deleted = s.rows_deleted + excluded.rows_deleted,
               min_age_seconds = least(s.min_age_seconds, excluded.min_age_seconds),
               retry_window_seconds = greatest(s.retry_window_seconds, excluded.retry_window_seconds),
               min_margin_seconds = least(s.min_margin_seconds, excluded.min_margin_seconds),
               max_past_expiry_seconds = greatest(s.max_past_expiry_seconds, excluded.max_past_expiry_seconds)`,
      values: [runId, deleted.map((d) => d.service), deleted.map((d) => d.scope), deleted.map((d) => d.rows), deleted.map((d) => d.minAge), deleted.map((d) => d.maxPastExpiry)],
    });
  }
  await db.query({
    name: 'retention_sweep_progress',
    text: 'UPDATE sweep_runs SET chunks = chunks + $2, rows_deleted = rows_deleted + $3 WHERE id = $1',
    values: [runId, chunks, deleted.reduce((sum, d) => sum + d.rows, 0)],
  });
}

/** What the next run writes on a run left 'running' by a sweeper that stopped without finishing it. */
export const INTERRUPTED_RUN_ERROR = 'interrupted: the sweeper stopped before finishing this run (its process or its connection ended); what it deleted up to then is recorded';

/**
 * Closes runs left 'running' (only the holder of the sweeper's lock runs, so any other is
 * dead): those after the last finished run, which a backward scan of the primary key finds.
 * Earlier ones were closed by the run that finished after them.
 */
async function closeInterruptedRuns(client: pg.ClientBase, runId: number): Promise<number> {
  const { rowCount } = await client.query(
    `UPDATE sweep_runs SET status = 'failed', stop_reason = 'error', error = $2, finished_at = now()
     WHERE id > coalesce((SELECT id FROM sweep_runs WHERE finished_at IS NOT NULL ORDER BY id DESC LIMIT 1), 0)
       AND id <> $1 AND status = 'running'`,
    [runId, INTERRUPTED_RUN_ERROR],
  );
  return rowCount ?? 0;
}

export async function sweepOnce(pool: pg.Pool, trigger: SweepResult['trigger'], overrides: Partial<SweepOptions> = {}): Promise<SweepResult> {
  const options = { ...defaultSweepOptions, ...overrides };
  const client = await pool.connect();
  const held: HeldConnection = { client };
  const result: SweepResult = {
    status: 'completed',
    runId: null,
    trigger,
    chunks: 0,
    rowsDeleted: 0,
    staleReleased: 0,
    quotaBucketsDeleted: 0,
    attemptsDeleted: 0,
    unrecordedDeleted: 0,
    findingsDeleted: 0,
    partitionsCreated: 0,
    partitionsDropped: [],
    longestChunkMs: 0,
    stopReason: 'caught-up',
    scopes: [],
  };
  let broken: Error | undefined;
  try {
    const { rows: locked } = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1) AS locked', [SWEEPER_LOCK_KEY.toString()]);
    if (!locked[0]?.locked) return { ...result, status: 'skipped', stopReason: 'another-sweeper-running' };
    try {
      const { rows: run } = await client.query<{ id: string }>(
        "INSERT INTO sweep_runs (trigger, status) VALUES ($1, 'running') RETURNING id",
        [trigger],
      );
      const runId = Number(run[0]?.id);
      result.runId = runId;
      try {
        await closeInterruptedRuns(client, runId);
        result.staleReleased = await releaseStaleClaims(client, options.chunkSize, options.staleGraceMs);
        if (result.staleReleased > 0) await client.query('UPDATE sweep_runs SET stale_released = $2 WHERE id = $1', [runId, result.staleReleased]);
        if ((await detectStoreLayout(client)) === 'partitioned') {
          // Expiry is a partition drop: rows wait for their day partition to end (at most a day).
          result.partitionsCreated = await ensurePartitions(client);
          await dropExpiredPartitions(
            client,
            undefined,
            async (partition) => {
              // Recorded as soon as the partition is gone (DETACH CONCURRENTLY cannot share a transaction).
              await addRunEvidence(
                client,
                runId,
                partition.scopes.map((scope) => ({ service: scope.service, scope: scope.scope, rows: scope.rows, minAge: scope.minAgeSeconds, maxPastExpiry: scope.maxPastExpirySeconds })),
                0,
              );
              result.partitionsDropped.push(partition.name);
              result.rowsDeleted += partition.rows;
              result.longestChunkMs = Math.max(result.longestChunkMs, partition.detachMs, partition.dropMs);
            },
            options.detachTimeoutMs,
          ).catch((error: unknown) => {
            // The run goes on with the rest (the trace, the counters); it is recorded as failed, saying why.
            if (!(error instanceof DetachWaiting)) throw error;
            result.status = 'failed';
            result.stopReason = 'error';
            result.error = error.message;
          });
          // A key promised less than a day would wait longer than its retention for its partition.
          await sweepShortPromises(held, runId, options, result);
        } else {
          await sweepChunks(held, runId, options, result);
        }
        result.quotaBucketsDeleted = await deleteOldQuotaBuckets(client);
        result.attemptsDeleted = await sweepExpired(client, [SWEEP_ATTEMPTS_SQL, SWEEP_ATTEMPT_COUNTS_SQL], options.chunkSize, options.maxRowsPerRun);
        result.unrecordedDeleted = await sweepExpired(client, [SWEEP_UNRECORDED_SQL], options.chunkSize, options.maxRowsPerRun);
        result.findingsDeleted = await sweepExpired(client, [SWEEP_FINDINGS_SQL], options.chunkSize, options.maxRowsPerRun);
      } catch (error) {
        result.status = 'failed';
        result.stopReason = 'error';
        result.error = error instanceof Error ? error.message : String(error);
      }
      result.scopes = await recordRun(client, result);
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [SWEEPER_LOCK_KEY.toString()]).catch((error: unknown) => (broken = error as Error));
    }
    return result;
  } finally {
    // A chunk whose ROLLBACK failed left the connection unusable: discard it.
    client.release(held.broken ?? broken);
  }
}

/**
 * The partitioned layout: deletes the expired keys promised less than a partition's width, in
 * chunks that walk the expiry index on from the last walk's end (or the oldest partition's
 * start), each chunk's rows, evidence and walk's end committed together. Paced as the plain
 * layout's chunks, and budgeted in index entries walked; nothing to do where no policy promises
 * less than a day.
 */
async function sweepShortPromises(held: HeldConnection, runId: number, options: SweepOptions, result: SweepResult): Promise<void> {
  const { client } = held;
  const { rows: policies } = await client.query<{ short: boolean }>({ name: 'retention_short_policy', text: SHORT_POLICY_SQL, values: [PARTITION_SECONDS] });
  if (!policies[0]?.short) return;
  const { rows: cursor } = await client.query<{ at: string; swept_through: Date }>({ name: 'retention_short_cursor', text: SHORT_WALK_CURSOR_SQL });
  const partitions = await listPartitions(client);
  if (partitions.length === 0) return; // nothing stored
  // Rows expiring before the oldest partition still attached have left with their partitions.
  const oldest = Math.min(...partitions.map((partition) => partition.lowerBound.getTime()));
  // Expiries travel as Postgres's text: a JavaScript Date would drop their microseconds.
  const last = cursor[0];
  let from = last && last.swept_through.getTime() >= oldest ? last.at : new Date(oldest - 1).toISOString();
  // The budget counts entries walked, not rows deleted: a first walk (from the oldest partition's
  // start) may cross a day of longer promises, and the next run goes on from where this one ended.
  let walkedInRun = 0;
  for (;;) {
    const started = performance.now();
    const walked = await transactionOn(
      held,
      async (db) => {
        const { rows: walk } = await db.query<{ upto: string | null; walked: number }>({ name: 'retention_short_walk', text: SHORT_WALK_SQL, values: [options.chunkSize, from] });
        const upto = walk[0]?.upto;
        if (!upto) return { walked: 0, deleted: 0, upto: from };
        const { rows } = await db.query<ChunkRow>({ name: 'retention_short_sweep_chunk', text: SHORT_SWEEP_CHUNK_SQL, values: [from, upto, PARTITION_SECONDS] });
        await addRunEvidence(db, runId, chunkEvidence(rows), 1);
        await db.query('UPDATE sweep_runs SET swept_through = $2 WHERE id = $1', [runId, upto]);
        return { walked: walk[0]?.walked ?? 0, deleted: rows.reduce((sum, row) => sum + row.rows, 0), upto };
      },
      beginWithLockTimeout(options.lockTimeoutMs),
    ).catch((error: unknown) => {
      // lock_not_available: a row of the chunk is locked (see SHORT_SWEEP_CHUNK_SQL). The walk's
      // cleanup lag shows it if it lasts; the rest of the run goes on.
      if ((error as { code?: unknown }).code === '55P03') return null;
      throw error;
    });
    if (walked === null) break;
    const elapsed = performance.now() - started;
    from = walked.upto;
    if (walked.walked === 0) break;
    result.chunks += 1;
    result.rowsDeleted += walked.deleted;
    walkedInRun += walked.walked;
    result.longestChunkMs = Math.max(result.longestChunkMs, elapsed);
    if (walked.walked < options.chunkSize) break; // caught up
    if (walkedInRun >= options.maxRowsPerRun) {
      // A drop given up earlier in the run (DetachWaiting) stays the run's reason.
      if (result.stopReason === 'caught-up') result.stopReason = 'row-budget';
      break;
    }
    await sleep(Math.max(options.minPauseMs, elapsed * options.pauseFactor));
  }
}

async function sweepChunks(held: HeldConnection, runId: number, options: SweepOptions, result: SweepResult): Promise<void> {
  for (;;) {
    const started = performance.now();
    const rows = await sweepChunk(held, runId, options.chunkSize, options.lockTimeoutMs);
    const elapsed = performance.now() - started;
    const deleted = rows.reduce((sum, row) => sum + row.rows, 0);
    result.chunks += 1;
    result.rowsDeleted += deleted;
    result.longestChunkMs = Math.max(result.longestChunkMs, elapsed);
    if (deleted < options.chunkSize) break; // caught up
    if (result.rowsDeleted >= options.maxRowsPerRun) {
      result.stopReason = 'row-budget';
      break;
    }
    await sleep(Math.max(options.minPauseMs, elapsed * options.pauseFactor));
  }
}

/**
 * Quota counters only matter within the longest retention (plus one bucket). The table
 * holds principals x scopes x hour buckets x instances rows, small enough to scan.
 */
async function deleteOldQuotaBuckets(client: pg.ClientBase): Promise<number> {
  const result = await client.query(
    `DELETE FROM idempotency_key_usage
     WHERE bucket_start < now() - coalesce((SELECT max(retention_seconds) FROM endpoint_policies), 0) * interval '1 second' - interval '2 hours'`,
  );
  return result.rowCount ?? 0;
}

const SWEEP_ATTEMPTS_SQL = `WITH doomed AS (
               SELECT ctid FROM key_attempts WHERE expires_at < now() ORDER BY expires_at LIMIT $1
             )
             DELETE FROM key_attempts a USING doomed WHERE a.ctid = doomed.ctid`;
const SWEEP_ATTEMPT_COUNTS_SQL = `WITH doomed AS (
               SELECT ctid FROM key_attempt_counts WHERE expires_at < now() ORDER BY expires_at LIMIT $1
             )
             DELETE FROM key_attempt_counts c USING doomed WHERE c.ctid = doomed.ctid`;

const SWEEP_UNRECORDED_SQL = `WITH doomed AS (
               SELECT ctid FROM unrecorded_completions WHERE expires_at < now() ORDER BY expires_at LIMIT $1
             )
             DELETE FROM unrecorded_completions u USING doomed WHERE u.ctid = doomed.ctid`;

// The reconciler's findings of keys Redis has expired (a run deletes those it re-checks; these are
// the ones of a service whose reconciler stopped), through reconcile_findings_expiry_idx.
const SWEEP_FINDINGS_SQL = `WITH doomed AS (
               SELECT ctid FROM reconcile_findings WHERE expires_at < now() ORDER BY expires_at LIMIT $1
             )
             DELETE FROM reconcile_findings f USING doomed WHERE f.ctid = doomed.ctid`;

/** The sweep of the trace's statements (and of the unrecorded completions' and the reconciler's findings'), for the test that proves their plans. */
export const sweepAttemptsTexts = { attempts: SWEEP_ATTEMPTS_SQL, counts: SWEEP_ATTEMPT_COUNTS_SQL, unrecorded: SWEEP_UNRECORDED_SQL, findings: SWEEP_FINDINGS_SQL };

/**
 * The trace of attempts and the unrecorded completions expire with their key: each row carries
 * its key's expiry (the flush's copy), so the rows past it go in chunks through the expiry
 * indexes, each chunk its own statement (no long transaction), up to the run's row budget.
 * Returns the rows deleted.
 */
async function sweepExpired(client: pg.ClientBase, texts: readonly string[], chunkSize: number, maxRows: number): Promise<number> {
  let deleted = 0;
  for (const text of texts) {
    for (;;) {
      const result = await client.query(text, [chunkSize]);
      const rows = result.rowCount ?? 0;
      deleted += rows;
      if (rows < chunkSize || deleted >= maxRows) break;
    }
  }
  return deleted;
}

/** Finishes the run record (its evidence was added as it went) and reads the evidence back. */
async function recordRun(client: pg.ClientBase, result: SweepResult): Promise<ScopeEvidence[]> {
  await client.query(
    `UPDATE sweep_runs SET finished_at = now(), status = $2, chunks = $3, rows_deleted = $4, stale_released = $5,
       longest_chunk_ms = $6, stop_reason = $7, error = $8 WHERE id = $1`,
    [result.runId, result.status, result.chunks, result.rowsDeleted, result.staleReleased, result.longestChunkMs, result.stopReason, result.error ?? null],
  );
  const { rows } = await client.query<{
    service: string;
    scope: string;
    rows_deleted: string;
    min_age_seconds: number;
    retry_window_seconds: number | null;
    min_margin_seconds: number | null;
    max_past_expiry_seconds: number | null;
  }>(
    `SELECT service, scope, rows_deleted, min_age_seconds, retry_window_seconds, min_margin_seconds, max_past_expiry_seconds
     FROM sweep_run_scopes WHERE run_id = $1 ORDER BY service, scope`,
    [result.runId],
  );
  return rows.map((row) => ({
    service: row.service,
    scope: row.scope,
    rowsDeleted: Number(row.rows_deleted),
    minAgeSeconds: row.min_age_seconds,
    retryWindowSeconds: row.retry_window_seconds,
    minMarginSeconds: row.min_margin_seconds,
    maxPastExpirySeconds: row.max_past_expiry_seconds,
  }));
}

/** Runs sweepOnce on an interval; across instances only one runs at a time (the advisory lock). */
export class Sweeper {
  private readonly task: PeriodicTask;

  constructor(
    pool: pg.Pool,
    intervalMs: number,
    options: Partial<SweepOptions> = {},
    onResult: (result: SweepResult) => void = () => undefined,
    onError: (error: unknown) => void = () => undefined,
  ) {
    this.task = periodicTask({ name: 'sweep', intervalMs, run: async () => onResult(await sweepOnce(pool, 'schedule', options)), onError });
  }

  start(): void {
    this.task.start();
  }

  /** Stops the schedule and waits for a sweep in flight. */
  stop(): Promise<void> {
    return this.task.stop();
  }
}
