// The sweeper deletes only what is past its expires_at, in bounded chunks, one sweeper
// at a time, and records what it did with the evidence compliance needs.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { ensurePolicies } from '../../server/retention/policies';
import { ClaimNotStaleError, countStaleClaims, releaseStaleClaim } from '../../server/retention/stale-claims';
import { postgresKeyAccess } from '../helpers/key-access';
import { INTERRUPTED_RUN_ERROR, sweepOnce } from '../../server/retention/sweeper';
import { createPool } from '../../db/client';
import { DEMO_SERVICE } from '../../server/demo/policies';
import { useTestDatabase } from '../helpers/database';
import { createTestStore, jsonResult, principal, sleep, testPolicy } from '../../packages/store/test/helpers/store';

const SCOPE = 'POST /api/sweep-test';
const run = promisify(execFile);

describe('sweeper', () => {
  const db = useTestDatabase();

  beforeAll(async () => {
    await ensurePolicies(
      db.pool,
      DEMO_SERVICE,
      {
        [SCOPE]: {
          scopeMode: 'endpoint',
          retryWindowSeconds: 3_600,
          retentionSeconds: 7_200,
          leaseMs: 10_000,
          lockTimeoutMs: 1_000,
          maxResponseBytes: 1_024,
          liveKeyQuota: 1_000_000,
        },
      },
      'system',
    );
    // Another service's policy of the same endpoint string, with a shorter window.
    const orders = { scopeMode: 'endpoint' as const, retryWindowSeconds: 600, retentionSeconds: 1_200, leaseMs: 10_000, lockTimeoutMs: 1_000, maxResponseBytes: 1_024, liveKeyQuota: 1_000_000 };
    await ensurePolicies(db.pool, 'orders', { [SCOPE]: orders }, 'system');
    // Any deletion of a row whose expires_at has not passed fails the sweep loudly.
    await db.pool.query(`
      CREATE FUNCTION refuse_live_delete() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF OLD.expires_at >= clock_timestamp() THEN RAISE EXCEPTION 'deleted a live key (expires %)', OLD.expires_at; END IF;
        RETURN OLD;
      END $$;
      CREATE TRIGGER refuse_live_delete BEFORE DELETE ON idempotency_keys FOR EACH ROW EXECUTE FUNCTION refuse_live_delete();`);
  });

  /** Rows of one principal created `ageSeconds` ago that expire `expiresInSeconds` from now. */
  async function seed(count: number, ageSeconds: number, expiresInSeconds: number, principalId = principal(), state = 'completed', service: string = DEMO_SERVICE) {
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, response_status, response_content_type,
         response_body, response_key_id, completed_at, lease_expires_at, created_at, expires_at)
       SELECT $1, $8, $2, 'k-' || i || '-' || $5, $6, decode(repeat('ab', 32), 'hex'), gen_random_uuid(),
              CASE WHEN $6 = 'completed' THEN 201 END, 'application/json',
              CASE WHEN $6 = 'completed' THEN '\\x00'::bytea END, CASE WHEN $6 = 'completed' THEN 'k1' END,
              CASE WHEN $6 = 'completed' THEN now() END,
              CASE WHEN $6 = 'in_progress' THEN now() - interval '1 hour' END,
              now() - $3 * interval '1 second', now() + $4 * interval '1 second'
       FROM generate_series(1, $7::int) AS i`,
      [principalId, SCOPE, ageSeconds, expiresInSeconds, randomUUID().slice(0, 8), state, count, service],
    );
    return principalId;
  }

  it('has a guard that would catch a live deletion (the trigger works)', async () => {
    const p = await seed(1, 10, 3_600);
    await expect(db.pool.query('DELETE FROM idempotency_keys WHERE principal_id = $1', [p])).rejects.toThrow(/deleted a live key/);
  });

  const countOf = async (principalId: string) =>
    Number((await db.pool.query<{ n: string }>('SELECT count(*) AS n FROM idempotency_keys WHERE principal_id = $1', [principalId])).rows[0]?.n);

  it('deletes expired rows only, records the run and the evidence, per service', async () => {
    const expired = await seed(250, 7_300, -100);
    // Live, a minute from expiry: not sooner, or they expire while the file's next test runs
    // (on a loaded machine) and its sweep deletes them too.
    const live = await seed(40, 7_140, 60);
    // The other service's expired rows of the same endpoint, younger, judged against its own window.
    const expiredOrders = await seed(60, 1_300, -100, principal(), 'completed', 'orders');
    const result = await sweepOnce(db.pool, 'manual', { chunkSize: 100, minPauseMs: 0 });
    expect(result).toMatchObject({ status: 'completed', rowsDeleted: 310, chunks: 4, stopReason: 'caught-up' });
    expect([await countOf(expired), await countOf(live), await countOf(expiredOrders)]).toEqual([0, 40, 0]);
    const evidence = result.scopes.find((scope) => scope.service === DEMO_SERVICE && scope.scope === SCOPE);
    expect(evidence).toMatchObject({ rowsDeleted: 250, retryWindowSeconds: 3_600 });
    expect(evidence?.minAgeSeconds).toBeGreaterThanOrEqual(7_300);
    expect(evidence?.minMarginSeconds).toBeGreaterThanOrEqual(7_300 - 3_600);
    // How late the cleanup came: the rows expired 100 s before the sweep (recorded, and read back).
    expect(evidence?.maxPastExpirySeconds).toBeGreaterThanOrEqual(100);
    expect(evidence?.maxPastExpirySeconds).toBeLessThan(160);
    const ordersEvidence = result.scopes.find((scope) => scope.service === 'orders' && scope.scope === SCOPE);
    expect(ordersEvidence).toMatchObject({ rowsDeleted: 60, retryWindowSeconds: 600 });
    expect(ordersEvidence?.minAgeSeconds).toBeGreaterThanOrEqual(1_300);
    expect(ordersEvidence?.minAgeSeconds).toBeLessThan(7_300);
    expect(ordersEvidence?.minMarginSeconds).toBeGreaterThanOrEqual(1_300 - 600);
    const { rows } = await db.pool.query('SELECT status, chunks, rows_deleted, stop_reason, finished_at IS NOT NULL AS finished FROM sweep_runs WHERE id = $1', [result.runId]);
    expect(rows).toEqual([{ status: 'completed', chunks: 4, rows_deleted: '310', stop_reason: 'caught-up', finished: true }]);
    const stored = await db.pool.query('SELECT service, scope, rows_deleted, retry_window_seconds FROM sweep_run_scopes WHERE run_id = $1 ORDER BY service', [result.runId]);
    expect(stored.rows).toEqual([
      { service: DEMO_SERVICE, scope: SCOPE, rows_deleted: '250', retry_window_seconds: 3_600 },
      { service: 'orders', scope: SCOPE, rows_deleted: '60', retry_window_seconds: 600 },
    ]);
  });

  it('keeps the evidence of every chunk a sweeper deleted before it died, and the next run closes the dead run', { timeout: 30_000 }, async () => {
    const p = await seed(300, 7_300, -100);
    // The server's pool (a lost connection is logged, not a crash).
    const pool = createPool(db.url, { applicationName: 'sweeper-test', max: 1 });
    try {
      // Slow chunks of 20 rows; the sweeper's backend is terminated once some chunks committed.
      const dying = sweepOnce(pool, 'manual', { chunkSize: 20, minPauseMs: 150, pauseFactor: 0 }).catch((error: unknown) => error);
      let runId: string | undefined;
      for (let attempt = 0; attempt < 200 && !runId; attempt += 1) {
        await sleep(20);
        const { rows } = await db.pool.query<{ id: string }>("SELECT id FROM sweep_runs WHERE status = 'running' AND chunks >= 3 ORDER BY id DESC LIMIT 1");
        runId = rows[0]?.id;
      }
      expect(runId).toBeDefined();
      await db.pool.query(
        `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted AND ((classid::bigint << 32) | objid::bigint) = $1`,
        [0x72737377656570n.toString()],
      );
      await dying;
      const deleted = 300 - (await countOf(p));
      expect(deleted).toBeGreaterThanOrEqual(60);
      expect(deleted).toBeLessThan(300);
      // What it deleted is on its record, per scope, though it never finished.
      const run = await db.pool.query<{ status: string; rows_deleted: string; chunks: number }>('SELECT status, rows_deleted, chunks FROM sweep_runs WHERE id = $1', [runId]);
      expect(run.rows).toEqual([{ status: 'running', rows_deleted: String(deleted), chunks: deleted / 20 }]);
      const scopes = await db.pool.query<{ rows_deleted: string }>('SELECT rows_deleted FROM sweep_run_scopes WHERE run_id = $1', [runId]);
      expect(scopes.rows).toEqual([{ rows_deleted: String(deleted) }]);
      // The next run, holding the lock, closes it as interrupted and sweeps the rest.
      const next = await sweepOnce(db.pool, 'manual', { chunkSize: 500, minPauseMs: 0 });
      expect(next).toMatchObject({ status: 'completed', rowsDeleted: 300 - deleted });
      const closed = await db.pool.query<{ status: string; error: string; finished: boolean }>('SELECT status, error, finished_at IS NOT NULL AS finished FROM sweep_runs WHERE id = $1', [runId]);
      expect(closed.rows).toEqual([{ status: 'failed', error: INTERRUPTED_RUN_ERROR, finished: true }]);
      await expect(db.pool.query("SELECT 1 FROM sweep_runs WHERE status = 'running'").then((r) => r.rowCount)).resolves.toBe(0);
    } finally {
      await pool.end();
    }
  });

  it('bounds every run by its chunk size and row budget', async () => {
    const p = await seed(1_000, 8_000, -10);
    const result = await sweepOnce(db.pool, 'manual', { chunkSize: 100, maxRowsPerRun: 300, minPauseMs: 0 });
    expect(result).toMatchObject({ rowsDeleted: 300, chunks: 3, stopReason: 'row-budget' });
    expect(await countOf(p)).toBe(700);
    await sweepOnce(db.pool, 'manual', { chunkSize: 1_000, minPauseMs: 0 });
    expect(await countOf(p)).toBe(0);
  });

  it('never deletes a row inside its window while keys expire under a running sweep and late retries replay', async () => {
    const { store } = createTestStore(db.pool);
    const p = principal();
    const policy = { ...testPolicy, retryWindowMs: 1_000, retentionMs: 1_500 };
    const call = (key: string) => ({
      principalId: p,
      key,
      endpoint: SCOPE,
      method: 'POST',
      body: { key },
      policy,
      mode: 'claim-first' as const,
      work: () => Promise.resolve(jsonResult(201, { key })),
    });
    // When each key's first call started: its row was created after that, so it lives at least
    // until then plus the retention, and a retry started within the window must replay.
    const firstCalls = new Map<string, number>();
    for (let i = 0; i < 30; i += 1) {
      firstCalls.set(`late-${i}`, Date.now());
      await store.execute(call(`late-${i}`));
    }
    const deadline = Date.now() + 2_500;
    const retries: { inWindow: boolean; replayed: boolean }[] = [];
    const sweeps: Promise<unknown>[] = [];
    while (Date.now() < deadline) {
      sweeps.push(sweepOnce(db.pool, 'manual', { chunkSize: 7, minPauseMs: 0 }).then((result) => expect(result.status).not.toBe('failed')));
      const key = `late-${retries.length % 30}`;
      const startedAt = Date.now();
      const outcome = await store.execute(call(key));
      retries.push({ inWindow: startedAt < (firstCalls.get(key) ?? 0) + policy.retryWindowMs, replayed: outcome.replayed });
      await sleep(20);
    }
    await Promise.all(sweeps);
    // Every retry within its key's window replayed (judged by the clock, not by the retry's rank,
    // which a loaded machine pushes past the window); the trigger proves no live row was deleted.
    const inWindow = retries.filter((retry) => retry.inWindow);
    expect(inWindow.length).toBeGreaterThan(0);
    expect(inWindow.filter((retry) => !retry.replayed)).toEqual([]);
  });

  it('lets one sweeper run at a time across instances', async () => {
    await seed(3_000, 8_000, -10);
    const instanceA = new pg.Pool({ connectionString: db.url, max: 2 });
    const instanceB = new pg.Pool({ connectionString: db.url, max: 2 });
    const [a, b] = await Promise.all([
      sweepOnce(instanceA, 'schedule', { chunkSize: 100, minPauseMs: 20 }),
      sleep(30).then(() => sweepOnce(instanceB, 'schedule', { chunkSize: 100 })),
    ]);
    await Promise.all([instanceA.end(), instanceB.end()]);
    expect([a.status, b.status].sort()).toEqual(['completed', 'skipped']);
    expect((b.status === 'skipped' ? b : a).stopReason).toBe('another-sweeper-running');
  });

  // At least 8 s of paced chunks plus a CLI's start: on a loaded machine more than the default 30 s.
  it('lets one sweeper run at a time across two processes', { timeout: 120_000 }, async () => {
    await seed(20_000, 8_000, -10);
    // At least 200 chunks x 40 ms: long enough for a second process to start under load.
    const long = sweepOnce(db.pool, 'schedule', { chunkSize: 100, minPauseMs: 40 });
    await sleep(300);
    // While this process sweeps, another one (the CLI) finds the sweeper lock taken.
    const other = await run(process.execPath, ['--conditions=retrysafe-source', '--import', 'tsx', 'server/cli/main.ts', 'sweep'], {
      env: { ...process.env, DATABASE_URL: db.url },
      encoding: 'utf8',
    });
    const mine = await long;
    expect(JSON.parse(other.stdout)).toMatchObject({ status: 'skipped', stopReason: 'another-sweeper-running', rowsDeleted: 0 });
    expect(mine.status).toBe('completed');
    expect(mine.rowsDeleted).toBeGreaterThanOrEqual(20_000);
  });

  it('releases stale claims past the grace period, and lets an operator release one by hand, audited', async () => {
    const p = await seed(5, 60, 3_600, principal(), 'in_progress');
    expect(await countStaleClaims(db.pool)).toBeGreaterThanOrEqual(5);
    const withinGrace = await sweepOnce(db.pool, 'manual', { staleGraceMs: 2 * 3_600_000 });
    expect(withinGrace.staleReleased).toBe(0);
    const { rows: keys } = await db.pool.query<{ key: string }>('SELECT key FROM idempotency_keys WHERE principal_id = $1 ORDER BY key LIMIT 1', [p]);
    const key = keys[0]?.key ?? '';
    await releaseStaleClaim(postgresKeyAccess(db.pool), { principalId: p, service: DEMO_SERVICE, scope: SCOPE, key }, 'operator@example.com', 'processor confirmed the refund failed');
    await expect(releaseStaleClaim(postgresKeyAccess(db.pool), { principalId: p, service: DEMO_SERVICE, scope: SCOPE, key }, 'operator@example.com', 'again')).rejects.toBeInstanceOf(ClaimNotStaleError);
    const audit = await db.pool.query("SELECT actor, reason, target FROM audit_log WHERE action = 'stale_claim.release' AND target->>'key' = $1", [key]);
    expect(audit.rows).toEqual([{ actor: 'operator@example.com', reason: 'processor confirmed the refund failed', target: { principalId: p, service: DEMO_SERVICE, scope: SCOPE, key } }]);
    const released = await sweepOnce(db.pool, 'manual', { staleGraceMs: 60_000 });
    expect(released.staleReleased).toBeGreaterThanOrEqual(4);
    const { rows } = await db.pool.query<{ state: string }>('SELECT DISTINCT state FROM idempotency_keys WHERE principal_id = $1', [p]);
    expect(rows).toEqual([{ state: 'failed' }]);
  });
});
