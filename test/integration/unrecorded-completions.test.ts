// Completions that could not be recorded (issue 26.2): work that ran and whose response the store
// could not record is never left without a trace. The failure here is real: the store's own role
// loses its UPDATE privilege on the key table while the work runs (an operator's grant script gone
// wrong), so every completion after it fails with 42501, which no retry within the lease cures.
// Two instances of one service each keep theirs in memory and their flushes write them; the
// overview, read through the dashboard's role, counts both instances' per service, its check
// fires, the operator's (audited) list names each key and correlation id, /api/metrics exposes the
// count, and the sweeper removes them with their key's retention.
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRetrysafe, FlowRecorder, type Retrysafe } from '@retrysafe/store';
import { overviewQuery, readOverview } from '../../server/metrics/overview';
import { createPrometheusMetrics } from '../../server/metrics/prometheus';
import { listUnrecordedCompletions } from '../../server/idempotency/unrecorded';
import { sweepOnce } from '../../server/retention/sweeper';
import { useTestDatabase } from '../helpers/database';
import { postgresKeyAccess } from '../helpers/key-access';
import { jsonResult, testPolicy } from '../../packages/store/test/helpers/store';

const responseKeys = `k1:${randomBytes(32).toString('base64')}`;
const SERVICE = 'orders';
const ENDPOINT = 'POST /orders';

describe('completions that could not be recorded', () => {
  const db = useTestDatabase();
  const role = `rs_store_${randomBytes(4).toString('hex')}`;
  const password = randomBytes(12).toString('hex');
  let dashboard: pg.Pool;
  const instances: Retrysafe[] = [];
  const reported: { task: string; key?: string }[] = [];

  beforeAll(async () => {
    // A store role that owns nothing: the privileges it has are the ones granted here.
    await db.pool.query(`CREATE ROLE ${role} LOGIN PASSWORD '${password}'`);
    await db.pool.query(
      `GRANT USAGE ON SCHEMA retrysafe TO ${role};
       GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA retrysafe TO ${role};
       GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA retrysafe TO ${role};`,
    );
    const url = new URL(db.url);
    url.username = role;
    url.password = password;
    for (let i = 0; i < 2; i += 1) {
      instances.push(
        await createRetrysafe({
          connectionString: url.toString(),
          maxConnections: 4,
          service: SERVICE,
          fingerprintSecret: randomBytes(32),
          responseKeys,
          quota: false,
          // Flushed by the test, never by the timer.
          metricsFlushIntervalMs: 3_600_000,
          onError: (_error, context) => reported.push({ task: context.task, ...(context.key ? { key: context.key.key } : {}) }),
        }),
      );
    }
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 2 });
  });

  afterAll(async () => {
    for (const instance of instances) await instance.stop().catch(() => undefined);
    await (dashboard as pg.Pool | undefined)?.end();
    await db.pool.query(`DROP OWNED BY ${role}; DROP ROLE ${role}`);
  });

  const principalId = randomUUID();
  const attempt = (instance: Retrysafe, key: string, correlationId: string, work: () => Promise<void> = () => Promise.resolve()) =>
    instance.store.execute({
      principalId,
      endpoint: ENDPOINT,
      method: 'POST',
      key,
      body: { key },
      policy: testPolicy,
      mode: 'claim-first',
      correlationId,
      work: async () => {
        await work();
        return jsonResult(201, { key });
      },
    });

  it("counts both instances' per service on the overview, lists each key and correlation id (audited), and exposes the count", async () => {
    const [first, second] = instances as [Retrysafe, Retrysafe];
    // A completion that records: nothing to report.
    await attempt(first, 'recorded', randomUUID());
    const failed: { key: string; correlationId: string }[] = [];
    const failing = async (instance: Retrysafe, key: string, work?: () => Promise<void>) => {
      const correlationId = randomUUID();
      await expect(attempt(instance, key, correlationId, work)).rejects.toMatchObject({ code: '42501' });
      failed.push({ key, correlationId });
    };
    try {
      // Mid-flight: the claim committed, the work runs, and the role loses UPDATE on the key table.
      await failing(first, 'lost-1', () => db.pool.query(`REVOKE UPDATE ON retrysafe.idempotency_keys FROM ${role}`).then(() => undefined));
      await failing(first, 'lost-2');
      for (const key of ['lost-3', 'lost-4', 'lost-5']) await failing(second, key);
      // Each reported with its key, as it happened.
      expect(reported.filter((entry) => entry.task === 'record a completed attempt').map((entry) => entry.key).sort()).toEqual(['lost-1', 'lost-2', 'lost-3', 'lost-4', 'lost-5']);
      expect(first.store.unrecordedCompletions).toBe(2);
      expect(second.store.unrecordedCompletions).toBe(3);

      // The first instance's flush fails too (its role cannot insert them either): they wait for the next.
      await db.pool.query(`REVOKE INSERT ON retrysafe.unrecorded_completions FROM ${role}`);
      await expect(first.recorder.flush()).rejects.toMatchObject({ code: '42501' });
      await db.pool.query(`GRANT INSERT ON retrysafe.unrecorded_completions TO ${role}`);
      // Written while the key table still refuses the store's completions.
      await first.recorder.flush();
      await second.recorder.flush();
    } finally {
      await db.pool.query(`GRANT UPDATE ON retrysafe.idempotency_keys TO ${role}`);
    }
    // A flush sent again adds nothing twice (nothing is pending, and the rows are keyed by attempt).
    await first.recorder.flush();

    // The keys are still in progress: their retry waits for the lease, then runs the work again.
    const { rows: states } = await db.pool.query<{ key: string; state: string }>('SELECT key, state FROM retrysafe.idempotency_keys WHERE principal_id = $1 ORDER BY key', [principalId]);
    expect(states.filter((row) => row.key.startsWith('lost-')).map((row) => row.state)).toEqual(['in_progress', 'in_progress', 'in_progress', 'in_progress', 'in_progress']);

    // The overview (the dashboard's role), the service chosen, one of its scopes, or none.
    for (const query of [{ service: SERVICE }, { service: SERVICE, scope: ENDPOINT }, {}]) {
      const overview = await readOverview(dashboard, overviewQuery.parse({ range: '1h', ...query }));
      const check = overview.checks.find((candidate) => candidate.name === 'unrecorded_completions');
      expect(check, JSON.stringify(query)).toMatchObject({
        state: 'firing',
        severity: 'critical',
        service: SERVICE,
        scope: null,
        storeWide: false,
        value: '5 completions in the last hour',
        threshold: 'any in the last hour',
        link: 'unrecorded',
      });
      expect(check?.summary).toContain('orders: 5 completions could not be recorded in the last hour');
      expect(overview.alerts.map((alert) => alert.name)).toContain('unrecorded_completions');
    }
    // Another service's overview does not show them.
    const other = await readOverview(dashboard, overviewQuery.parse({ range: '1h', service: 'billing' }));
    expect(other.checks.find((candidate) => candidate.name === 'unrecorded_completions')).toMatchObject({ state: 'ok', service: 'billing', value: 'none in the last hour' });

    // The operator's list: every instance's, newest first, metadata only; audited before it answers.
    const listed = await listUnrecordedCompletions(postgresKeyAccess(dashboard), { reason: 'incident 77: completions failing', service: SERVICE }, 'ops@example.com');
    expect(listed.more).toBe(false);
    expect(listed.completions.map((row) => ({ key: row.key, correlationId: row.correlationId })).sort((a, b) => a.key.localeCompare(b.key))).toEqual(failed);
    for (const row of listed.completions) {
      expect(Object.keys(row).sort()).toEqual(['at', 'correlationId', 'errorClass', 'key', 'principalId', 'scope', 'service']);
      expect(row).toMatchObject({ principalId, service: SERVICE, scope: ENDPOINT, errorClass: 'DatabaseError 42501' });
    }
    const times = listed.completions.map((row) => row.at);
    expect(times).toEqual([...times].sort().reverse());
    const { rows: audit } = await db.pool.query<{ actor: string; target: unknown; reason: string; details: unknown }>(
      "SELECT actor, target, reason, details FROM audit_log WHERE action = 'key.unrecorded_list' ORDER BY id DESC LIMIT 1",
    );
    expect(audit[0]).toEqual({ actor: 'ops@example.com', target: { service: SERVICE, minutes: 60 }, reason: 'incident 77: completions failing', details: { listed: 5, more: false, principalIds: [principalId] } });
    const page = await listUnrecordedCompletions(postgresKeyAccess(dashboard), { reason: 'incident 77: the newest two', limit: 2 }, 'ops@example.com');
    expect(page).toMatchObject({ more: true });
    expect(page.completions).toHaveLength(2);
    // Each listing names the principals it showed, so the audit log searched for one finds both.
    const { rows: naming } = await db.pool.query<{ reason: string }>(
      "SELECT reason FROM audit_log WHERE action = 'key.unrecorded_list' AND details->'principalIds' ? $1 ORDER BY id",
      [principalId],
    );
    expect(naming.map((row) => row.reason)).toEqual(['incident 77: completions failing', 'incident 77: the newest two']);

    // /api/metrics: the same count, whichever instance is scraped.
    const text = await createPrometheusMetrics(db.pool).registry.metrics();
    expect(text).toContain(`retrysafe_unrecorded_completions_window{service="${SERVICE}"} 5`);
  });

  it('keeps at most unrecordedKept waiting, counting the rest', async () => {
    const recorder = new FlowRecorder(db.pool, { flushIntervalMs: 3_600_000, unrecordedKept: 2 });
    const base = { principalId: randomUUID(), service: 'bounded', scope: ENDPOINT, retentionMs: 60_000 };
    for (const key of ['a', 'b', 'c']) recorder.completionUnrecorded({ ...base, key, correlationId: randomUUID() }, Object.assign(new Error('the message is never kept: secret'), { code: 'ECONNRESET' }));
    expect(recorder.droppedUnrecorded).toBe(1);
    await recorder.flush();
    const { rows } = await db.pool.query<{ key: string; error_class: string }>("SELECT key, error_class FROM unrecorded_completions WHERE service = 'bounded' ORDER BY key");
    expect(rows).toEqual([
      { key: 'a', error_class: 'Error ECONNRESET' },
      { key: 'b', error_class: 'Error ECONNRESET' },
    ]);
    // A listing across principals names each of them once in its audit row.
    const listed = await listUnrecordedCompletions(postgresKeyAccess(dashboard), { reason: 'every service: two principals' }, 'ops@example.com');
    expect(listed.completions).toHaveLength(7);
    const { rows: audit } = await db.pool.query<{ details: unknown }>("SELECT details FROM audit_log WHERE action = 'key.unrecorded_list' ORDER BY id DESC LIMIT 1");
    expect(audit[0]?.details).toEqual({ listed: 7, more: false, principalIds: [principalId, base.principalId].sort() });
  });

  it("are swept with their key's retention", async () => {
    const { rows: before } = await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM unrecorded_completions WHERE service = 'bounded'");
    expect(before[0]?.n).toBe(2);
    await db.pool.query("UPDATE unrecorded_completions SET expires_at = now() - interval '1 minute' WHERE service = 'bounded'");
    const result = await sweepOnce(db.pool, 'manual', { chunkSize: 100, minPauseMs: 0 });
    expect(result.status).toBe('completed');
    expect(result.unrecordedDeleted).toBe(2);
    const { rows: after } = await db.pool.query<{ service: string; n: number }>('SELECT service, count(*)::int AS n FROM unrecorded_completions GROUP BY service');
    expect(after).toEqual([{ service: SERVICE, n: 5 }]);
  });
});
