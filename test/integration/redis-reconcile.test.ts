// Dual-write reconciliation (issue 27.5): records claimed and completed in a real Redis by the
// Redis backend, effects in a real Postgres table of the test's own, and the reconciler between
// them. A completed key whose effect is missing is found, one whose effect exists is not; a claim
// past its lease is found with whether its effect exists; the budget bounds the records read and
// the effectExists calls; findings leave the list once resolved; effectExists's errors are
// counted and reported, never thrown; one instance runs at a time; and no finding or answer
// carries a body or a fingerprint.
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRetrysafe } from '@retrysafe/store';
import { RedisBackend, RedisReconciler, parseReconcileOptions, type EffectQuery, type ReconcileOptions } from '@retrysafe/store/redis';
import pg from 'pg';
import { listReconcileFindings } from '../../server/idempotency/reconcile';
import { overviewQuery, readOverview } from '../../server/metrics/overview';
import { createPrometheusMetrics } from '../../server/metrics/prometheus';
import { sweepOnce } from '../../server/retention/sweeper';
import { useTestDatabase } from '../helpers/database';
import { postgresKeyAccess } from '../helpers/key-access';
import { hasRedis, startRedis, type TestRedis } from '../../packages/store/test/helpers/redis';

const SERVICE = 'orders-reconcile';
const SCOPE = 'POST /orders';
const BODY = Buffer.from('{"secret-body":"never in a finding"}');

describe.runIf(hasRedis)('the Redis reconciler', () => {
  const db = useTestDatabase();
  let redis: TestRedis;
  let backend: RedisBackend;
  beforeAll(async () => {
    redis = await startRedis();
    backend = new RedisBackend(redis.connection.commands);
    await db.pool.query('CREATE TABLE test_effects (correlation_id text PRIMARY KEY)');
  });
  afterAll(async () => {
    await redis.stop();
  });

  /** A key claimed (lease leaseMs) and, unless open, completed with a body; its effect written when `effect`. */
  async function key(principalId: string, name: string, options: { effect: boolean; open?: boolean; leaseMs?: number }): Promise<string> {
    const correlationId = randomUUID();
    const id = { principalId, service: SERVICE, scope: SCOPE, key: name };
    const claim = await backend.claim({ ...id, fingerprint: randomBytes(32), correlationId, leaseMs: options.leaseMs ?? 60_000, retentionMs: 3_600_000 });
    expect(claim.claimed).toBe(true);
    if (options.effect) await db.pool.query('INSERT INTO test_effects VALUES ($1)', [correlationId]);
    if (!options.open) await backend.complete({ ...id, attempts: 1, status: 201, contentType: 'application/json', body: BODY, keyId: 'k1', size: BODY.length, reference: null });
    return correlationId;
  }

  const calls: EffectQuery[] = [];
  const effectExists = async (query: EffectQuery) => {
    calls.push(query);
    const { rowCount } = await db.pool.query('SELECT 1 FROM test_effects WHERE correlation_id = $1', [query.correlationId]);
    return rowCount === 1;
  };
  const errors: { error: unknown; task: string }[] = [];
  const reconciler = (options: Partial<ReconcileOptions> = {}) =>
    new RedisReconciler(db.pool, redis.connection.commands, SERVICE, { effectExists, settleMs: 0, ...options }, (error, task) => errors.push({ error, task }));
  const findings = async () =>
    (
      await db.pool.query<{ principal_id: string; key: string; kind: string; effect: string; correlation_id: string }>(
        'SELECT principal_id, key, kind, effect, correlation_id FROM reconcile_findings WHERE service = $1 ORDER BY key',
        [SERVICE],
      )
    ).rows;
  const clearAll = async () => {
    await redis.command('FLUSHALL');
    await db.pool.query('DELETE FROM reconcile_findings; DELETE FROM reconcile_runs; DELETE FROM test_effects');
    calls.length = 0;
    errors.length = 0;
  };

  it('finds a completed key whose effect is missing, not one whose effect exists, and a claim past its lease with whether its effect exists', async () => {
    await clearAll();
    const principalId = randomUUID();
    const missing = await key(principalId, 'a-missing', { effect: false });
    await key(principalId, 'b-present', { effect: true });
    const crashed = await key(principalId, 'c-crashed', { effect: true, open: true, leaseMs: 1 });
    await key(principalId, 'd-running', { effect: false, open: true, leaseMs: 60_000 });
    await new Promise((done) => setTimeout(done, 20));
    const run = await reconciler().runOnce();
    expect(run).toMatchObject({ status: 'completed', examined: 4, effectChecks: 3, effectErrors: 0, effectMissing: 1, staleClaims: 1, unlisted: 0 });
    expect(await findings()).toEqual([
      { principal_id: principalId, key: 'a-missing', kind: 'effect_missing', effect: 'missing', correlation_id: missing },
      { principal_id: principalId, key: 'c-crashed', kind: 'stale_claim', effect: 'present', correlation_id: crashed },
    ]);
    // effectExists was asked with metadata only.
    expect(calls.map((c) => c.key).sort()).toEqual(['a-missing', 'b-present', 'c-crashed']);
    expect(calls.find((c) => c.key === 'a-missing')).toEqual({ principalId, service: SERVICE, scope: SCOPE, key: 'a-missing', correlationId: missing, reference: null, state: 'completed' });
    const runRow = await db.pool.query('SELECT examined, effect_checks, effect_errors FROM reconcile_runs WHERE service = $1', [SERVICE]);
    expect(runRow.rows).toEqual([{ examined: 4, effect_checks: 3, effect_errors: 0 }]);
  });

  it('clears a finding once it resolves: its effect appears, its key completes or expires', async () => {
    await clearAll();
    const principalId = randomUUID();
    const missing = await key(principalId, 'a-missing', { effect: false });
    await key(principalId, 'b-stale', { effect: false, open: true, leaseMs: 1 });
    await key(principalId, 'c-expires', { effect: false });
    await new Promise((done) => setTimeout(done, 20));
    const r = reconciler();
    expect(await r.runOnce()).toMatchObject({ effectMissing: 2, staleClaims: 1 });
    expect((await findings()).find((f) => f.key === 'b-stale')).toMatchObject({ kind: 'stale_claim', effect: 'missing' });
    // The effect appears; the stale claim is completed (a retry took it over and finished); the third key expires.
    await db.pool.query('INSERT INTO test_effects VALUES ($1)', [missing]);
    const stale = { principalId, service: SERVICE, scope: SCOPE, key: 'b-stale' };
    const attempts = await backend.takeOver({ ...stale, fingerprint: randomBytes(32), correlationId: randomUUID(), leaseMs: 60_000, retentionMs: 3_600_000 }, 1);
    expect(attempts).toBe(2);
    // Its new attempt's effect is written with its own correlation id, as the retry's work would.
    const record = (await redis.command('HGET', `retrysafe:{${principalId}:${SERVICE}}:${SCOPE.length}:${SCOPE}:b-stale`, 'cid')) as Buffer;
    await db.pool.query('INSERT INTO test_effects VALUES ($1)', [record.toString()]);
    await backend.complete({ ...stale, attempts: 2, status: 201, contentType: 'application/json', body: BODY, keyId: 'k1', size: BODY.length, reference: null });
    await redis.command('DEL', `retrysafe:{${principalId}:${SERVICE}}:${SCOPE.length}:${SCOPE}:c-expires`);
    const after = await r.runOnce();
    expect(after).toMatchObject({ effectMissing: 0, staleClaims: 0, cleared: 3 });
    expect(await findings()).toEqual([]);
  });

  it('reads at most its budget of records and makes at most that many effectExists calls a run, and goes round the keyspace run after run', async () => {
    await clearAll();
    const principals = Array.from({ length: 6 }, () => randomUUID());
    for (const principalId of principals) for (let i = 0; i < 5; i += 1) await key(principalId, `k${i}`, { effect: false });
    const r = reconciler({ budget: 7, maxFindings: 1_000 });
    const first = await r.runOnce();
    expect(first.examined).toBeLessThanOrEqual(7);
    expect(first.effectChecks).toBeLessThanOrEqual(7);
    expect(calls.length).toBeLessThanOrEqual(7);
    // Later runs re-check up to half the budget and sample the rest (ZRANDMEMBER of the next index the
    // SCAN found): over enough runs, all 30 are found.
    for (let run = 0; run < 200 && (await findings()).length < 30; run += 1) {
      calls.length = 0;
      const next = await r.runOnce();
      expect(next.examined).toBeLessThanOrEqual(7);
      expect(calls.length).toBeLessThanOrEqual(7);
    }
    expect(await findings()).toHaveLength(30);
  });

  it('keeps at most maxFindings for the service and counts the rest as unlisted', async () => {
    await clearAll();
    const principalId = randomUUID();
    for (let i = 0; i < 5; i += 1) await key(principalId, `k${i}`, { effect: false });
    const run = await reconciler({ maxFindings: 2 }).runOnce();
    expect(run).toMatchObject({ effectMissing: 2, unlisted: 3 });
  });

  it("counts effectExists's errors and timeouts, reports them to onError, and makes no finding of a completed key it could not check", async () => {
    await clearAll();
    const principalId = randomUUID();
    await key(principalId, 'a', { effect: false });
    await key(principalId, 'b', { effect: false });
    let n = 0;
    const run = await new RedisReconciler(
      db.pool,
      redis.connection.commands,
      SERVICE,
      {
        effectExists: () => {
          n += 1;
          return n === 1 ? Promise.reject(new Error('orders database down')) : new Promise<boolean>(() => undefined);
        },
        effectTimeoutMs: 50,
        settleMs: 0,
      },
      (error, task) => errors.push({ error, task }),
    ).runOnce();
    expect(run).toMatchObject({ status: 'completed', effectChecks: 2, effectErrors: 2, effectMissing: 0 });
    expect(errors.map((e) => [e.task, (e.error as Error).message])).toEqual([
      ['redis reconcile: effectExists', expect.stringMatching(/orders database down|no answer in 50 ms/)],
      ['redis reconcile: effectExists', expect.stringMatching(/orders database down|no answer in 50 ms/)],
    ]);
    expect((await db.pool.query('SELECT effect_errors, effect_errors_total FROM reconcile_runs WHERE service = $1', [SERVICE])).rows).toEqual([{ effect_errors: 2, effect_errors_total: 2 }]);
  });

  it('leaves a key that completed within settleMs for a later run', async () => {
    await clearAll();
    await key(randomUUID(), 'fresh', { effect: false });
    const run = await reconciler({ settleMs: 60_000 }).runOnce();
    expect(run).toMatchObject({ effectChecks: 0, effectMissing: 0 });
  });

  it('runs on one instance at a time: a run while another holds the lock is skipped', async () => {
    await clearAll();
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [0x72737263, SERVICE]);
      expect(await reconciler().runOnce()).toMatchObject({ status: 'skipped', examined: 0 });
      await holder.query('ROLLBACK');
    } finally {
      holder.release();
    }
  });

  it('validates its options, naming each wrong one', () => {
    expect(() => parseReconcileOptions({ effectExists: 'yes', budget: 0 })).toThrow(/effectExists: effectExists must be a function; budget: /);
    expect(() => parseReconcileOptions({ effectExists, intervalMs: 10 })).toThrow(/intervalMs/);
    expect(() => parseReconcileOptions({ effectExists, surprise: 1 })).toThrow(/surprise|Unrecognized/);
    expect(parseReconcileOptions({ effectExists })).toMatchObject({ intervalMs: 60_000, budget: 200, settleMs: 10_000, effectTimeoutMs: 5_000, maxFindings: 1_000 });
  });

  it('runs inside createRetrysafe({ redis: { url, reconcile } }), stops with it, and keeps no body or fingerprint in any finding', async () => {
    await clearAll();
    const retrysafe = await createRetrysafe({
      connectionString: db.url,
      service: SERVICE,
      fingerprintSecret: randomBytes(32),
      responseKeys: `k1:${randomBytes(32).toString('base64')}`,
      metricsFlushIntervalMs: 3_600_000,
      redis: { url: redis.url, reconcile: { effectExists, settleMs: 0, intervalMs: 3_600_000 } },
    });
    try {
      const principalId = randomUUID();
      const answer = await retrysafe.store.execute({
        principalId,
        key: 'through-the-store',
        endpoint: SCOPE,
        method: 'POST',
        body: { sku: 'a', quantity: 1 },
        policy: { scopeMode: 'endpoint', retryWindowMs: 3_600_000, retentionMs: 7_200_000, leaseMs: 10_000, lockTimeoutMs: 2_000, maxResponseBytes: 1_024, liveKeyQuota: 1_000_000 },
        mode: 'claim-first',
        work: () => Promise.resolve({ status: 201, contentType: 'application/json', body: BODY }),
      });
      expect(answer.status).toBe(201);
      const run = await retrysafe.redis?.reconcileNow();
      expect(run).toMatchObject({ status: 'completed', effectMissing: 1 });
      const rows = await db.pool.query('SELECT * FROM reconcile_findings WHERE service = $1', [SERVICE]);
      expect(rows.rows).toHaveLength(1);
      const everything = JSON.stringify(rows.rows) + JSON.stringify(run);
      expect(everything).not.toContain('secret-body');
      expect(Object.keys(rows.rows[0] as object).sort()).toEqual(
        ['attempts', 'checked_at', 'completed_at', 'correlation_id', 'created_at', 'effect', 'expires_at', 'found_at', 'key', 'kind', 'lease_expired_at', 'principal_id', 'scope', 'service'].sort(),
      );
    } finally {
      await retrysafe.stop();
    }
    await expect(
      createRetrysafe({ connectionString: db.url, service: SERVICE, fingerprintSecret: randomBytes(32), responseKeys: `k1:${randomBytes(32).toString('base64')}`, redis: { url: redis.url, reconcile: { effectExists, budget: -1 } } }),
    ).rejects.toThrow(/redis.reconcile: budget/);
  });

  it("shows on the Retrysafe server through the dashboard's role: counts per service and scope, an audited drill-down with metadata only, the overview's check, /api/metrics; swept with the key's retention", async () => {
    await clearAll();
    const principalId = randomUUID();
    const missing = await key(principalId, 'a-missing', { effect: false });
    await key(principalId, 'b-crashed', { effect: true, open: true, leaseMs: 1 });
    await new Promise((done) => setTimeout(done, 20));
    await reconciler().runOnce();
    const dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 2 });
    try {
      // Least privilege: the dashboard reads findings, never writes them.
      await expect(dashboard.query('DELETE FROM reconcile_findings')).rejects.toMatchObject({ code: '42501' });
      const answer = await listReconcileFindings(postgresKeyAccess(dashboard), { reason: 'incident 91: effects missing', service: SERVICE }, 'ops@example.com');
      expect(answer.services).toEqual([
        expect.objectContaining({ service: SERVICE, examined: 2, effectChecks: 2, effectErrors: 0, unlisted: 0, scopes: [{ scope: SCOPE, effectMissing: 1, staleClaims: 1, staleWithEffect: 1 }] }),
      ]);
      expect(answer.more).toBe(false);
      expect(answer.findings.map((f) => [f.key, f.kind, f.effect])).toEqual(
        expect.arrayContaining([
          ['a-missing', 'effect_missing', 'missing'],
          ['b-crashed', 'stale_claim', 'present'],
        ]),
      );
      for (const finding of answer.findings) {
        expect(Object.keys(finding).sort()).toEqual(['attempts', 'checkedAt', 'completedAt', 'correlationId', 'createdAt', 'effect', 'foundAt', 'key', 'kind', 'leaseExpiredAt', 'principalId', 'scope', 'service']);
      }
      expect(JSON.stringify(answer)).not.toContain('secret-body');
      expect(answer.findings.find((f) => f.key === 'a-missing')?.correlationId).toBe(missing);
      const drill = await listReconcileFindings(postgresKeyAccess(dashboard), { reason: 'incident 91: the stale ones', service: SERVICE, scope: SCOPE, kind: 'stale_claim' }, 'ops@example.com');
      expect(drill.findings.map((f) => f.key)).toEqual(['b-crashed']);
      const { rows: audit } = await db.pool.query<{ actor: string; target: unknown; reason: string; details: unknown }>(
        "SELECT actor, target, reason, details FROM audit_log WHERE action = 'key.reconcile_list' ORDER BY id",
      );
      expect(audit).toEqual([
        { actor: 'ops@example.com', target: { service: SERVICE }, reason: 'incident 91: effects missing', details: { listed: 2, more: false, principalIds: [principalId] } },
        { actor: 'ops@example.com', target: { service: SERVICE, scope: SCOPE, kind: 'stale_claim' }, reason: 'incident 91: the stale ones', details: { listed: 1, more: false, principalIds: [principalId] } },
      ]);
      // The overview's check fires for the service, and links to the findings.
      const overview = await readOverview(dashboard, overviewQuery.parse({ range: '1h', service: SERVICE }));
      expect(overview.checks.find((check) => check.name === 'effects_missing')).toMatchObject({ state: 'firing', severity: 'critical', service: SERVICE, value: '1 completed key', link: 'reconcile' });
      // /api/metrics.
      const text = await createPrometheusMetrics(db.pool).registry.metrics();
      expect(text).toContain(`retrysafe_reconcile_findings{service="${SERVICE}",scope="${SCOPE}",kind="effect_missing"} 1`);
      expect(text).toContain(`retrysafe_reconcile_findings{service="${SERVICE}",scope="${SCOPE}",kind="stale_claim"} 1`);
      expect(text).toMatch(new RegExp(`retrysafe_reconcile_last_run_timestamp_seconds\\{service="${SERVICE}"\\} \\d`));
      expect(text).toContain(`retrysafe_reconcile_effect_errors{service="${SERVICE}"} 0`);
    } finally {
      await dashboard.end();
    }
    // Findings whose key's retention has passed go with the sweep.
    await db.pool.query("UPDATE reconcile_findings SET expires_at = now() - interval '1 minute' WHERE service = $1", [SERVICE]);
    const swept = await sweepOnce(db.pool, 'manual', { chunkSize: 100, minPauseMs: 0 });
    expect(swept.findingsDeleted).toBe(2);
  });
});
