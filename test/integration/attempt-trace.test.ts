// The trace of attempts (issue 31.1): the flow recorder keeps each replay, conflict, mismatch and
// quota refusal per key and writes them in its one flush statement (never a body, never a
// fingerprint); at most 20 attempts per key; a per-principal budget per minute, the rest counted
// as dropped; swept with their key. The request path sends exactly what it sent without the trace.
import pg from 'pg';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FlowRecorder, newCorrelationId, FingerprintMismatchError, KeyInUseError, KeyQuotaExceededError, type FlowEvent } from '@retrysafe/store';
import { sweepOnce } from '../../server/retention/sweeper';
import { keyListSchema, listPrincipalKeys, lookUpKey } from '../../server/idempotency/key-metadata';
import { lookUpCorrelation } from '../../server/idempotency/correlation';
import { postgresKeyAccess } from '../helpers/key-access';
import { layouts, useTestDatabase } from '../helpers/database';
import { createTestStore, LiveKeyQuota, principal, simpleCall, testPolicy, TEST_SERVICE } from '../../packages/store/test/helpers/store';

/** A pool whose statements are counted (every client.query, whatever calls it). */
function countingPool(url: string): { pool: pg.Pool; statements: () => number } {
  let statements = 0;
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
      statements += 1;
      return query(...args);
    };
  });
  return { pool, statements: () => statements };
}

interface AttemptRow {
  principal_id: string;
  service: string;
  scope: string;
  key: string;
  outcome: string;
  status: number;
  correlation_id: string;
  at: Date;
  expires_at: Date;
}

const attemptsOf = async (db: pg.Pool, principalId: string) =>
  (await db.query<AttemptRow>('SELECT * FROM retrysafe.key_attempts WHERE principal_id = $1 ORDER BY at, outcome', [principalId])).rows;

const countsOf = async (db: pg.Pool, principalId: string, key: string) =>
  (
    await db.query<{ replays: number; conflicts: number; mismatches: number; quota_refusals: number; expires_at: Date }>(
      'SELECT replays, conflicts, mismatches, quota_refusals, expires_at FROM retrysafe.key_attempt_counts WHERE principal_id = $1 AND key = $2',
      [principalId, key],
    )
  ).rows[0];

describe.each(layouts)('trace of attempts (%s layout)', (layout) => {
  const db = useTestDatabase(layout);
  let store: ReturnType<typeof countingPool>;
  let recorderDb: ReturnType<typeof countingPool>;
  beforeAll(() => {
    store = countingPool(db.url);
    recorderDb = countingPool(db.url);
  });
  afterAll(async () => {
    await store.pool.end();
    await recorderDb.pool.end();
  });

  it('writes one row per replay, 409, 422 and 429 with its correlation id, key, outcome and status in the one flush statement, and the key counts; the request path sends what it sent without it', async () => {
    const recorder = new FlowRecorder(recorderDb.pool, { flushIntervalMs: 3_600_000 });
    const quota = new LiveKeyQuota(db.pool, { service: TEST_SERVICE, flushIntervalMs: 600_000 });
    // The store under test reports to the recorder; the other to nothing but a list.
    const { store: tracedStore, events } = createTestStore(store.pool, { layout, quota, observer: recorder });
    const untraced = createTestStore(store.pool, { layout, quota }).store;
    const p = principal();
    const q = principal();
    const onePolicy = { ...testPolicy, liveKeyQuota: 1 };

    const run = async (subject: typeof tracedStore, who: string) => {
      const sent = store.statements();
      const answers: unknown[] = [];
      answers.push((await subject.execute(simpleCall(who, 'claim-first', { policy: onePolicy }))).status);
      answers.push((await subject.execute(simpleCall(who, 'claim-first', { policy: onePolicy }))).replayed);
      answers.push(await subject.execute(simpleCall(who, 'claim-first', { policy: onePolicy, body: { a: 2 } })).catch((error: unknown) => error instanceof FingerprintMismatchError));
      // In flight: a begun claim of another key not finished (the quota of 1 is taken, so it is refused).
      answers.push(await subject.execute(simpleCall(who, 'claim-first', { policy: onePolicy, key: 'other' })).catch((error: unknown) => error instanceof KeyQuotaExceededError));
      const begun = await subject.begin({ ...simpleCall(who, 'claim-first', { key: 'slow' }) });
      answers.push(await subject.execute(simpleCall(who, 'claim-first', { key: 'slow' })).catch((error: unknown) => error instanceof KeyInUseError));
      if (begun.claimed) await begun.abandon();
      return { answers, statements: store.statements() - sent };
    };
    const withTrace = await run(tracedStore, p);
    const without = await run(untraced, q);
    expect(withTrace.answers).toEqual([201, true, true, true, true]);
    expect(without.answers).toEqual(withTrace.answers);
    // The request path: the same statements with the trace as without it, and none on the recorder's pool.
    expect(withTrace.statements).toBe(without.statements);
    expect(recorderDb.statements()).toBe(0);

    await recorder.flush();
    expect(recorderDb.statements()).toBe(1); // one statement for the whole flush

    // In the order the attempts happened: two may share a millisecond (the trace's time), which
    // the query's ORDER BY at would then break by outcome name.
    const happened = events.map((event) => event.correlationId);
    const rows = (await attemptsOf(db.pool, p)).sort((one, other) => happened.indexOf(one.correlation_id) - happened.indexOf(other.correlation_id));
    const correlationOf = (outcome: string) => events.find((event) => event.outcome === outcome)?.correlationId;
    expect(rows.map((row) => [row.key, row.outcome, row.status, row.correlation_id, row.service, row.scope])).toEqual([
      ['k', 'replay', 201, correlationOf('replay'), TEST_SERVICE, 'POST /x'],
      ['k', 'mismatch', 422, correlationOf('mismatch'), TEST_SERVICE, 'POST /x'],
      ['other', 'rejected', 429, correlationOf('rejected'), TEST_SERVICE, 'POST /x'],
      ['slow', 'conflict', 409, correlationOf('conflict'), TEST_SERVICE, 'POST /x'],
    ]);
    // Each attempt expires with its key: the live key's expiry, or (never created) its time plus the retention.
    const key = (await db.pool.query<{ expires_at: Date }>("SELECT expires_at FROM retrysafe.idempotency_keys WHERE principal_id = $1 AND key = 'k'", [p])).rows[0];
    expect(rows[0]?.expires_at.getTime()).toBe(key?.expires_at.getTime());
    const refused = rows[2];
    expect(refused && refused.expires_at.getTime() - refused.at.getTime()).toBe(testPolicy.retentionMs);
    expect(await countsOf(db.pool, p, 'k')).toMatchObject({ replays: 1, conflicts: 0, mismatches: 1, quota_refusals: 0 });
    expect(await countsOf(db.pool, p, 'other')).toMatchObject({ quota_refusals: 1 });
    expect(await countsOf(db.pool, p, 'slow')).toMatchObject({ conflicts: 1 });
    // Nothing of the untraced store's principal, and nothing but these columns: no body, no fingerprint.
    expect(await attemptsOf(db.pool, q)).toEqual([]);
    const columns = await db.pool.query<{ table_name: string; column_name: string }>(
      "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'retrysafe' AND table_name IN ('key_attempts', 'key_attempt_counts') ORDER BY 1, 2",
    );
    expect(columns.rows.map((row) => `${row.table_name}.${row.column_name}`)).toEqual([
      'key_attempt_counts.conflicts',
      'key_attempt_counts.expires_at',
      'key_attempt_counts.key',
      'key_attempt_counts.last_at',
      'key_attempt_counts.mismatches',
      'key_attempt_counts.principal_id',
      'key_attempt_counts.quota_refusals',
      'key_attempt_counts.replays',
      'key_attempt_counts.scope',
      'key_attempt_counts.service',
      'key_attempts.at',
      'key_attempts.correlation_id',
      'key_attempts.expires_at',
      'key_attempts.key',
      'key_attempts.outcome',
      'key_attempts.principal_id',
      'key_attempts.scope',
      'key_attempts.service',
      'key_attempts.status',
    ]);
    await recorder.stop();
    await quota.stop();
  });
});

describe('trace of attempts: bounds and sweep', () => {
  const db = useTestDatabase();
  const event = (principalId: string, key: string, outcome: 'replay' | 'conflict' | 'mismatch' | 'rejected' = 'mismatch'): FlowEvent => ({
    service: TEST_SERVICE,
    scope: 'POST /x',
    principalId,
    outcome,
    key,
    correlationId: randomUUID(),
    status: { replay: 201, conflict: 409, mismatch: 422, rejected: 429 }[outcome],
    retentionMs: testPolicy.retentionMs,
  });

  it('keeps the last 20 attempts of a key across flushes and counts every one', async () => {
    let clock = Date.now();
    const recorder = new FlowRecorder(db.pool, { flushIntervalMs: 3_600_000, now: () => (clock += 1) });
    const p = principal();
    const sent: string[] = [];
    for (const round of [25, 7, 30]) {
      for (let i = 0; i < round; i += 1) {
        const e = event(p, 'busy', i % 2 === 0 ? 'mismatch' : 'replay');
        sent.push(e.correlationId as string);
        recorder.record(e);
      }
      await recorder.flush();
    }
    const rows = await attemptsOf(db.pool, p);
    expect(rows.map((row) => row.correlation_id)).toEqual(sent.slice(-20));
    expect(await countsOf(db.pool, p, 'busy')).toMatchObject({ mismatches: 13 + 4 + 15, replays: 12 + 3 + 15 });
    expect(recorder.droppedAttempts).toBe(0);
  });

  it("drops what exceeds a principal's budget per minute and counts it; other principals keep theirs", async () => {
    const recorder = new FlowRecorder(db.pool, { flushIntervalMs: 3_600_000, attemptBudgetPerMinute: 5 });
    const [flood, quiet] = [principal(), principal()];
    for (let i = 0; i < 12; i += 1) recorder.record(event(flood, `flood-${i}`));
    recorder.record(event(quiet, 'one'));
    expect(recorder.droppedAttempts).toBe(7);
    await recorder.flush();
    expect(await attemptsOf(db.pool, flood)).toHaveLength(5);
    expect(await attemptsOf(db.pool, quiet)).toHaveLength(1);
    const keys = await db.pool.query('SELECT 1 FROM retrysafe.key_attempt_counts WHERE principal_id = $1', [flood]);
    expect(keys.rowCount).toBe(5);
  });

  it('sweeps the attempts and counts of an expired key with it, and keeps a live key\'s', async () => {
    const recorder = new FlowRecorder(db.pool, { flushIntervalMs: 3_600_000 });
    const { store } = createTestStore(db.pool, { observer: recorder });
    const [gone, live] = [principal(), principal()];
    for (const p of [gone, live]) {
      await store.execute(simpleCall(p, 'claim-first'));
      await store.execute(simpleCall(p, 'claim-first'));
    }
    await recorder.flush();
    expect(await attemptsOf(db.pool, gone)).toHaveLength(1);
    // Time passes for one key: its row and its trace are past their expiry (the trace's is the key's).
    await db.pool.query("UPDATE retrysafe.idempotency_keys SET created_at = now() - interval '3 hours', expires_at = now() - interval '1 hour' WHERE principal_id = $1", [gone]);
    await db.pool.query("UPDATE retrysafe.key_attempts SET expires_at = now() - interval '1 hour' WHERE principal_id = $1", [gone]);
    await db.pool.query("UPDATE retrysafe.key_attempt_counts SET expires_at = now() - interval '1 hour' WHERE principal_id = $1", [gone]);
    const result = await sweepOnce(db.pool, 'manual', { chunkSize: 100, minPauseMs: 0 });
    expect(result.status).toBe('completed');
    expect(result.attemptsDeleted).toBe(2);
    expect(await attemptsOf(db.pool, gone)).toEqual([]);
    expect(await countsOf(db.pool, gone, 'k')).toBeUndefined();
    expect(await attemptsOf(db.pool, live)).toHaveLength(1);
    expect(await countsOf(db.pool, live, 'k')).toMatchObject({ replays: 1 });
  });
});

describe('trace of attempts on the dashboard (its role)', () => {
  const db = useTestDatabase();
  let dashboard: pg.Pool;
  beforeAll(() => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 2 });
  });
  afterAll(async () => {
    await dashboard.end();
  });

  it("shows a key's counts, last attempts and what a retry now gets; finds a 422's correlation id with its key; says why an id finds nothing; audits each", async () => {
    const recorder = new FlowRecorder(db.pool, { flushIntervalMs: 3_600_000 });
    const { store, events } = createTestStore(db.pool, { observer: recorder });
    await db.pool.query("INSERT INTO retrysafe.endpoint_policies (service, endpoint, scope_mode, retry_window_seconds, retention_seconds, lease_ms, lock_timeout_ms, max_response_bytes, live_key_quota, updated_by) VALUES ($1, 'POST /x', 'endpoint', 3600, 7200, 10000, 2000, 1024, 1000000, 'test') ON CONFLICT DO NOTHING", [TEST_SERVICE]);
    const p = principal();
    await store.execute(simpleCall(p, 'claim-first'));
    await store.execute(simpleCall(p, 'claim-first'));
    await store.execute(simpleCall(p, 'claim-first', { body: { a: 'other' } })).catch(() => undefined);
    await recorder.flush();
    const mismatchId = events.find((event) => event.outcome === 'mismatch')?.correlationId ?? '';
    const access = postgresKeyAccess(dashboard);

    const [record] = await lookUpKey(access, { principalId: p, key: 'k', reason: 'ticket 777: customer got a 422' }, 'ops@example.com');
    expect(record?.counts).toEqual({ replays: 1, conflicts: 0, mismatches: 1, quotaRefusals: 0 });
    expect(record?.lastAttempts.map((attempt) => [attempt.outcome, attempt.status])).toEqual([['mismatch', 422], ['replay', 201]]);
    expect(record?.lastAttempts[0]?.correlationId).toBe(mismatchId);
    // The record's own number of claims is kept beside its trace (one claim, no takeover).
    expect(record?.attempts).toBe(1);
    expect(record?.retryNow).toMatchObject({ sameBody: 'replay', status: 201, otherBody: 422, newClaimAfter: record?.expiresAt });
    expect(record?.retryNow.text).toBe(`replay of 201; 422 for another body; a new claim after expiry at ${record?.expiresAt}`);

    const found = await lookUpCorrelation(access, { correlationId: mismatchId, reason: 'ticket 777: the id the customer quotes' }, 'ops@example.com');
    expect(found.records).toEqual([]);
    expect(found.notFound).toBeNull();
    expect(found.attempts).toHaveLength(1);
    expect(found.attempts[0]).toMatchObject({ principalId: p, service: TEST_SERVICE, scope: 'POST /x', key: 'k', outcome: 'mismatch', status: 422, correlationId: mismatchId });
    expect(found.attempts[0]?.record).toMatchObject({ state: 'completed', statusCode: 201, counts: { mismatches: 1 } });

    // Nothing found: an id within the retention (never seen) and one older than any retention.
    const fresh = newCorrelationId();
    expect((await lookUpCorrelation(access, { correlationId: fresh, reason: 'ticket 778' }, 'ops@example.com')).notFound).toMatchObject({ why: 'never-seen' });
    const old = `${(Date.now() - 400 * 86_400_000).toString(16).padStart(12, '0').replace(/^(.{8})/, '$1-')}${fresh.slice(13)}`;
    expect((await lookUpCorrelation(access, { correlationId: old, reason: 'ticket 779' }, 'ops@example.com')).notFound).toMatchObject({ why: 'older-than-retention' });
    expect((await lookUpCorrelation(access, { correlationId: randomUUID(), reason: 'ticket 780' }, 'ops@example.com')).notFound).toMatchObject({ why: 'never-seen', issuedAt: null });

    // The key list marks the key with its conflicts and mismatches.
    const page = await listPrincipalKeys(access, keyListSchema.parse({ principalId: p, reason: 'ticket 77x: the tenant keys' }), 'ops@example.com');
    expect(page.keys.map((key) => [key.key, key.conflicts, key.mismatches])).toEqual([['k', 0, 1]]);

    // Each read audited; no answer carries the fingerprint.
    const audit = await db.pool.query<{ action: string; details: { attempts?: number } }>("SELECT action, details FROM audit_log WHERE reason LIKE 'ticket 77%' ORDER BY id");
    expect(audit.rows.map((row) => [row.action, row.details.attempts])).toEqual([
      ['key.lookup', 2],
      ['key.correlation_lookup', 1],
      ['key.correlation_lookup', 0],
      ['key.correlation_lookup', 0],
      ['key.list', undefined],
    ]);
    const fingerprint = (await db.pool.query<{ hex: string }>("SELECT encode(fingerprint, 'hex') AS hex FROM retrysafe.idempotency_keys WHERE principal_id = $1", [p])).rows[0]?.hex ?? '';
    expect(JSON.stringify([record, found, page])).not.toContain(fingerprint.slice(8));
  });
});

describe('trace of attempts of a key used again, partitioned layout (its expired record is kept until its partition ends)', () => {
  const db = useTestDatabase('partitioned');
  let dashboard: pg.Pool;
  beforeAll(() => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 2 });
  });
  afterAll(async () => {
    await dashboard.end();
  });

  it("shows the live record's trace on the live record only, never on the expired one beside it", async () => {
    const recorder = new FlowRecorder(db.pool, { flushIntervalMs: 3_600_000 });
    const { store } = createTestStore(db.pool, { layout: 'partitioned', observer: recorder });
    await db.pool.query("INSERT INTO retrysafe.endpoint_policies (service, endpoint, scope_mode, retry_window_seconds, retention_seconds, lease_ms, lock_timeout_ms, max_response_bytes, live_key_quota, updated_by) VALUES ($1, 'POST /x', 'endpoint', 3600, 7200, 10000, 2000, 1024, 1000000, 'test') ON CONFLICT DO NOTHING", [TEST_SERVICE]);
    const p = principal();
    await store.execute(simpleCall(p, 'claim-first'));
    await store.execute(simpleCall(p, 'claim-first'));
    await recorder.flush();
    // The key expires (still inside today's partition), with its trace; then it is used again:
    // a new row beside the kept one, and a replay traced against the new one.
    const expiry = "greatest(date_trunc('day', now(), 'UTC'), now() - interval '1 minute')";
    await db.pool.query(
      `UPDATE retrysafe.idempotency_keys SET created_at = ${expiry} - interval '2 hours', completed_at = ${expiry} - interval '2 hours', expires_at = ${expiry} WHERE principal_id = $1`,
      [p],
    );
    await db.pool.query(`UPDATE retrysafe.key_attempts SET expires_at = ${expiry} WHERE principal_id = $1`, [p]);
    await db.pool.query(`UPDATE retrysafe.key_attempt_counts SET expires_at = ${expiry} WHERE principal_id = $1`, [p]);
    await store.execute(simpleCall(p, 'claim-first'));
    await store.execute(simpleCall(p, 'claim-first'));
    await store.execute(simpleCall(p, 'claim-first'));
    await recorder.flush();

    const records = await lookUpKey(postgresKeyAccess(dashboard), { principalId: p, key: 'k', reason: 'ticket 881: a key used again' }, 'ops@example.com');
    expect(records).toHaveLength(2);
    const expired = records.find((record) => record.secondsLeft <= 0);
    const live = records.find((record) => record.secondsLeft > 0);
    expect(live?.counts).toMatchObject({ replays: 2 });
    expect(live?.lastAttempts.map((attempt) => attempt.outcome)).toEqual(['replay', 'replay']);
    expect(expired?.counts).toEqual({ replays: 0, conflicts: 0, mismatches: 0, quotaRefusals: 0 });
    expect(expired?.lastAttempts).toEqual([]);
    expect(expired?.retryNow.sameBody).toBe('new claim');
  });
});
