// Fault 7: the sweeper interrupted. (a) Plain layout, under load: expired and live keys are
// seeded, a sweep run in a process of its own is SIGKILLed while a chunk's DELETE is running;
// the next run must delete every expired row and none inside its window. (b) Partitioned
// layout, in a second database of the cluster: a day partition past its end is being detached
// CONCURRENTLY while an old transaction holds the table; the DETACH is cancelled
// (pg_cancel_backend), which leaves it pending; the next run must FINALIZE and drop it, and no
// live row may go with it.
import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { SERVER_SEARCH_PATH_OPTIONS } from '../db/client';
import { migrateDatabase } from '../db/migrate';
import { listPartitions } from '../server/retention/partitions';
import { sweepOnce } from '../server/retention/sweeper';
import { underLoad, type Fault, type Harness } from './harness';

const EXPIRED = 60_000;
const LIVE = 5_000;

async function seed(db: pg.Pool | pg.Client, principalId: string, prefix: string, expiredAt: string, liveFrom: string): Promise<void> {
  const columns = `(principal_id, service, scope, key, state, fingerprint, correlation_id, created_at, expires_at, completed_at, response_status, response_ref)`;
  // Expired: past their expiry. Live: inside their window, the nearest 10 minutes from its end.
  await db.query(
    `INSERT INTO idempotency_keys ${columns}
     SELECT $1, 'demo', 'POST /api/v1/payments', $2 || '-expired-' || n, 'completed', decode(repeat('00', 32), 'hex'), gen_random_uuid(),
            (${expiredAt})::timestamptz - interval '26 hours' - n * interval '1 millisecond', (${expiredAt})::timestamptz - n * interval '1 millisecond',
            (${expiredAt})::timestamptz - interval '26 hours', 201, 'pay_seed'
       FROM generate_series(1, $3) AS n`,
    [principalId, prefix, EXPIRED],
  );
  await db.query(
    `INSERT INTO idempotency_keys ${columns}
     SELECT $1, 'demo', 'POST /api/v1/payments', $2 || '-live-' || n, 'completed', decode(repeat('00', 32), 'hex'), gen_random_uuid(),
            now() - interval '1 hour', (${liveFrom})::timestamptz + n * interval '15 seconds', now() - interval '1 hour', 201, 'pay_seed'
       FROM generate_series(1, $3) AS n`,
    [principalId, prefix, LIVE],
  );
}

async function counts(db: pg.Pool | pg.Client, prefix: string): Promise<{ expired: number; live: number }> {
  const { rows } = await db.query<{ expired: string; live: string }>(
    `SELECT count(*) FILTER (WHERE key LIKE $1 || '-expired-%') AS expired, count(*) FILTER (WHERE key LIKE $1 || '-live-%') AS live FROM idempotency_keys WHERE key LIKE $1 || '-%'`,
    [prefix],
  );
  return { expired: Number(rows[0]?.expired ?? 0), live: Number(rows[0]?.live ?? 0) };
}

/** Runs one sweep in a child process; with `killWhenChunkRuns`, SIGKILLs it as soon as a chunk's DELETE is active. */
async function childSweep(harness: Harness, killWhenChunkRuns: boolean): Promise<{ killedMidChunk: boolean; output: string }> {
  const child = spawn(process.execPath, ['--conditions=retrysafe-source', '--import', 'tsx', 'faults/sweep-child.ts'], {
    env: { ...process.env, DATABASE_URL: harness.cluster.url, SWEEP_CHUNK: '5000' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((done) => child.once('exit', () => done()));
  let killedMidChunk = false;
  if (killWhenChunkRuns) {
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline && child.exitCode === null) {
      const { rows } = await harness.db.query<{ n: string }>(
        `SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'faults-sweeper' AND state = 'active' AND query LIKE '%doomed%'`,
      );
      if (Number(rows[0]?.n) > 0) {
        child.kill('SIGKILL');
        killedMidChunk = true;
        break;
      }
      await sleep(5);
    }
  }
  await exited;
  return { killedMidChunk, output: output.trim() };
}

async function plainLayout(harness: Harness): Promise<{ notes: string[]; failures: string[] }> {
  const notes: string[] = [];
  const failures: string[] = [];
  const principal = harness.tenants[0]?.principalId;
  if (!principal) throw new Error('no tenant');
  await seed(harness.db, principal, 'f7s', 'now()', "now() + interval '10 minutes'");
  const killed = await childSweep(harness, true);
  const afterKill = await counts(harness.db, 'f7s');
  notes.push(`sweeper SIGKILLed ${killed.killedMidChunk ? 'while a chunk ran' : 'before any chunk was seen running'}; ${EXPIRED - afterKill.expired} of ${EXPIRED} expired rows deleted before the kill`);
  if (!killed.killedMidChunk) failures.push('the sweeper finished before a chunk could be caught running: not killed mid-chunk');
  const { rows: stale } = await harness.db.query<{ n: string }>(`SELECT count(*) AS n FROM sweep_runs WHERE status = 'running'`);
  // The killed run's record holds every row it deleted (each chunk's evidence commits with it).
  const { rows: record } = await harness.db.query<{ id: string; rows_deleted: string; scoped: string }>(
    `SELECT id, rows_deleted, (SELECT coalesce(sum(rows_deleted), 0) FROM sweep_run_scopes s WHERE s.run_id = r.id) AS scoped
     FROM sweep_runs r WHERE status = 'running' ORDER BY id DESC LIMIT 1`,
  );
  const deletedBeforeKill = EXPIRED - afterKill.expired;
  const killedRun = record[0];
  if (!killedRun) failures.push("the killed run left no record 'running'");
  else if (Number(killedRun.rows_deleted) !== deletedBeforeKill || Number(killedRun.scoped) !== deletedBeforeKill) {
    failures.push(`the killed run's record says ${killedRun.rows_deleted} rows deleted (${killedRun.scoped} in its per-scope evidence), but ${deletedBeforeKill} were`);
  }
  const next = await childSweep(harness, false);
  const { rows: stillRunning } = await harness.db.query<{ n: string }>(`SELECT count(*) AS n FROM sweep_runs WHERE status = 'running'`);
  if (Number(stillRunning[0]?.n) > 0) failures.push(`${stillRunning[0]?.n} run record(s) still 'running' after the next run`);
  const finished = await counts(harness.db, 'f7s');
  let parsed: { status?: string; rowsDeleted?: number } = {};
  try {
    parsed = JSON.parse(next.output.split('\n').pop() ?? '{}') as typeof parsed;
  } catch {
    failures.push(`the next sweep run printed no result: ${next.output.slice(0, 300)}`);
  }
  notes.push(`next run: ${parsed.status ?? '?'}, ${parsed.rowsDeleted ?? '?'} rows deleted; ${finished.expired} expired and ${finished.live} of ${LIVE} live seeded rows left; ${stale[0]?.n ?? 0} run record(s) left 'running' by the killed run, its record ${killedRun ? `${killedRun.rows_deleted} rows` : 'missing'}, closed by the next run`);
  if (parsed.status !== 'completed') failures.push(`the next sweep run did not complete (${parsed.status ?? next.output.slice(0, 200)})`);
  if (finished.expired > 0) failures.push(`${finished.expired} expired row(s) left after the next run`);
  if (finished.live !== LIVE) failures.push(`${LIVE - finished.live} row(s) inside their window deleted`);
  return { notes, failures };
}

async function partitionedLayout(harness: Harness): Promise<{ notes: string[]; failures: string[] }> {
  const notes: string[] = [];
  const failures: string[] = [];
  const admin = new pg.Client({ connectionString: harness.cluster.url, options: SERVER_SEARCH_PATH_OPTIONS });
  await admin.connect();
  await admin.query('DROP DATABASE IF EXISTS faults_partitioned');
  await admin.query('CREATE DATABASE faults_partitioned');
  await admin.end();
  const url = harness.cluster.url.replace(/\/postgres$/, '/faults_partitioned');
  await migrateDatabase(url, { layout: 'partitioned' });
  const pool = new pg.Pool({ connectionString: url, options: SERVER_SEARCH_PATH_OPTIONS, max: 4, application_name: 'faults-partitioned' });
  const blocker = new pg.Client({ connectionString: url, options: SERVER_SEARCH_PATH_OPTIONS, application_name: 'faults-old-transaction' });
  try {
    // A day long past: its partition's upper bound has passed, so the sweep detaches and drops it.
    await pool.query(`CREATE TABLE idempotency_keys_p20200101 PARTITION OF idempotency_keys FOR VALUES FROM ('2020-01-01 00:00+00') TO ('2020-01-02 00:00+00')`);
    const principal = '00000000-0000-4000-8000-000000000007';
    await seed(pool, principal, 'f7p', "'2020-01-01 23:00+00'", "now() + interval '10 minutes'");
    // A transaction older than the detach: DETACH ... CONCURRENTLY waits for it in its second phase.
    await blocker.connect();
    await blocker.query('BEGIN');
    await blocker.query('SELECT count(*) FROM idempotency_keys');
    const first = sweepOnce(pool, 'manual');
    let cancelled = false;
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && !cancelled) {
      const { rows } = await pool.query<{ cancelled: boolean }>(
        `SELECT pg_cancel_backend(pid) AS cancelled FROM pg_stat_activity WHERE query LIKE 'ALTER TABLE idempotency_keys DETACH PARTITION%CONCURRENTLY' AND wait_event_type = 'Lock'`,
      );
      cancelled = rows.some((row) => row.cancelled);
      if (!cancelled) await sleep(20);
    }
    const interrupted = await first;
    await blocker.query('ROLLBACK');
    const pending = (await listPartitions(pool)).find((partition) => partition.name === 'idempotency_keys_p20200101');
    notes.push(`partitioned: DETACH CONCURRENTLY ${cancelled ? 'cancelled while it waited' : 'never seen waiting'}; that run ${interrupted.status}${interrupted.error ? ` (${interrupted.error})` : ''}; partition ${pending?.detachPending ? 'left detach-pending' : pending ? 'still attached' : 'gone'}`);
    if (!cancelled) failures.push('the DETACH ... CONCURRENTLY was never caught waiting to be cancelled');
    const next = await sweepOnce(pool, 'manual');
    const after = await listPartitions(pool);
    const left = await counts(pool, 'f7p');
    notes.push(`partitioned next run: ${next.status}, dropped ${next.partitionsDropped.join(', ') || 'nothing'}; ${left.live} of ${LIVE} live rows left`);
    if (after.some((partition) => partition.name === 'idempotency_keys_p20200101')) failures.push('the interrupted partition was not finished and dropped by the next run');
    if (left.expired > 0) failures.push(`${left.expired} expired row(s) of the partition left`);
    if (left.live !== LIVE) failures.push(`${LIVE - left.live} live row(s) deleted with the partition`);
  } finally {
    await blocker.end().catch(() => undefined);
    await pool.end();
  }
  return { notes, failures };
}

export const sweeperKilled: Fault = {
  number: 7,
  name: 'sweeper killed mid-chunk; partition detach cancelled',
  run: async (harness) => {
    let plain: { notes: string[]; failures: string[] } = { notes: [], failures: [] };
    const result = await underLoad(
      harness,
      '7. sweeper interrupted',
      'f7',
      async () => {
        plain = await plainLayout(harness);
        return { faultEnd: Date.now() };
      },
      { afterMs: 4_000 },
    );
    const partitioned = await partitionedLayout(harness);
    result.notes.push(...plain.notes, ...partitioned.notes);
    result.failures.push(...plain.failures, ...partitioned.failures);
    return result;
  },
};
