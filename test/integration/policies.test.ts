// Endpoint policies: the promise in the database, per service and endpoint, every change
// versioned with who, when, old -> new and why, in the same transaction; breaking changes need
// an acknowledgement.
import { describe, expect, it } from 'vitest';
import {
  BreakingChangeNotAcknowledgedError,
  changePolicy,
  ensurePolicies,
  getPolicy,
  InvalidPolicyError,
  knownScopes,
  listPolicies,
  policyHistory,
  PolicyVersionConflictError,
  toEndpointPolicy,
  type PolicyFields,
} from '../../server/retention/policies';
import { ServicePolicies } from '@retrysafe/store';
import { useTestDatabase } from '../helpers/database';
import { DEMO_SERVICE } from '../../server/demo/policies';

const S = DEMO_SERVICE;

const base: PolicyFields = {
  scopeMode: 'endpoint',
  retryWindowSeconds: 86_400,
  retentionSeconds: 93_600,
  leaseMs: 30_000,
  lockTimeoutMs: 5_000,
  maxResponseBytes: 4_096,
  liveKeyQuota: 100_000,
};

describe('endpoint policies', () => {
  const db = useTestDatabase();
  let n = 0;
  const endpoint = () => `POST /api/test-${(n += 1)}`;

  it('creates missing defaults once, with a first history entry (the record of the creation, not an audit row)', async () => {
    const e = endpoint();
    expect(await ensurePolicies(db.pool, S, { [e]: base }, 'system')).toEqual([e]);
    expect(await ensurePolicies(db.pool, S, { [e]: { ...base, retryWindowSeconds: 1 } }, 'system')).toEqual([]);
    expect(await getPolicy(db.pool, S, e)).toMatchObject({ ...base, version: 1, updatedBy: 'system' });
    const history = await policyHistory(db.pool, { service: S, endpoint: e });
    expect(history).toHaveLength(1);
    expect(history[0]).toMatchObject({ version: 1, changedBy: 'system', reason: "created with the service's default policy", previous: null, current: base, breaking: false });
    // The store writes no audit row (the audit log is the server's, retrysafe_server.audit_log).
    const { rowCount } = await db.pool.query("SELECT 1 FROM retrysafe_server.audit_log WHERE action = 'policy.create' AND target = jsonb_build_object('service', $1::text, 'endpoint', $2::text)", [S, e]);
    expect(rowCount).toBe(0);
  });

  it('records every change with who, when, old -> new and why, in the same transaction as the change', async () => {
    const e = endpoint();
    await ensurePolicies(db.pool, S, { [e]: base }, 'system');
    const longer = { ...base, retryWindowSeconds: 172_800, retentionSeconds: 180_000 };
    const result = await changePolicy(db.pool, { service: S, endpoint: e, fields: longer, actor: 'alice@example.com', reason: 'mobile clients retry for 2 days', expectedVersion: 1 });
    expect(result).toMatchObject({ breaking: false, policy: { version: 2, retryWindowSeconds: 172_800, updatedBy: 'alice@example.com' } });
    const [latest] = await policyHistory(db.pool, { service: S, endpoint: e });
    expect(latest).toMatchObject({ version: 2, changedBy: 'alice@example.com', reason: 'mobile clients retry for 2 days', previous: base, current: longer });
    const { rows } = await db.pool.query<{ changed_at: Date; updated_at: Date }>(
      'SELECT h.changed_at, p.updated_at FROM endpoint_policy_history h JOIN endpoint_policies p USING (service, endpoint) WHERE h.service = $1 AND h.endpoint = $2 AND h.version = 2',
      [S, e],
    );
    // Same transaction: the same now().
    expect(rows[0]?.changed_at.getTime()).toBe(rows[0]?.updated_at.getTime());
  });

  it('refuses a retention below the documented window, in the application and in the database', async () => {
    const e = endpoint();
    await ensurePolicies(db.pool, S, { [e]: base }, 'system');
    await expect(
      changePolicy(db.pool, { service: S, endpoint: e, fields: { ...base, retentionSeconds: 3_600 }, actor: 'a', reason: 'disk', expectedVersion: 1 }),
    ).rejects.toBeInstanceOf(InvalidPolicyError);
    await expect(db.pool.query('UPDATE endpoint_policies SET retention_seconds = 60 WHERE service = $1 AND endpoint = $2', [S, e])).rejects.toMatchObject({
      code: '23514',
      constraint: 'endpoint_policies_retention_covers_window',
    });
    expect((await getPolicy(db.pool, S, e))?.version).toBe(1);
  });

  it("refuses in the operator's words, never field names or raw seconds, and audits the refusal with its reason", async () => {
    const e = endpoint();
    await ensurePolicies(db.pool, S, { [e]: base }, 'system');
    const below = changePolicy(db.pool, { service: S, endpoint: e, fields: { ...base, retentionSeconds: 3_600 }, actor: 'dora', reason: 'disk is full', expectedVersion: 1 });
    await expect(below).rejects.toThrow('Retention must be at least the 24 h retry window (1 h would delete keys while clients may still retry).');
    const lease = changePolicy(db.pool, { service: S, endpoint: e, fields: { ...base, leaseMs: 5 }, actor: 'dora', reason: 'faster takeover', expectedVersion: 1 });
    await expect(lease).rejects.toThrow('The lease must be from 0.1 s to 24 h.');
    const shorter = changePolicy(db.pool, { service: S, endpoint: e, fields: { ...base, retryWindowSeconds: 3_600, retentionSeconds: 7_200 }, actor: 'dora', reason: 'shorter', expectedVersion: 1 });
    await expect(shorter).rejects.toThrow('Shortening the documented retry window from 24 h to 1 h makes late retries unsafe: acknowledge the breaking change to save it.');
    for (const refusal of [below, lease, shorter]) {
      const message = await refusal.then(() => '', (error: unknown) => (error instanceof Error ? error.message : ''));
      expect(message).not.toMatch(/Seconds|Ms\b|86400|3600|\d{4,} s/);
    }
    const { rows } = await db.pool.query<{ actor: string; reason: string; target: unknown; details: { refusal: string; code: string } }>(
      "SELECT actor, reason, target, details FROM audit_log WHERE action = 'policy.change_refused' AND target->>'endpoint' = $1 ORDER BY id",
      [e],
    );
    expect(rows.map((row) => [row.actor, row.reason, row.details.code])).toEqual([
      ['dora', 'disk is full', 'INVALID_POLICY'],
      ['dora', 'faster takeover', 'INVALID_POLICY'],
      ['dora', 'shorter', 'BREAKING_CHANGE_NOT_ACKNOWLEDGED'],
    ]);
    expect(rows[0]?.details.refusal).toBe('Retention must be at least the 24 h retry window (1 h would delete keys while clients may still retry).');
    expect(rows[0]?.target).toEqual({ service: S, endpoint: e, version: 1 });
    // Nothing changed, and an accepted breaking change records that it was acknowledged.
    expect((await getPolicy(db.pool, S, e))?.version).toBe(1);
    await changePolicy(db.pool, { service: S, endpoint: e, fields: { ...base, retryWindowSeconds: 3_600, retentionSeconds: 7_200 }, actor: 'dora', reason: 'agreed', expectedVersion: 1, acknowledgeBreakingChange: true });
    const changed = await db.pool.query<{ details: { breaking: boolean; acknowledged: boolean } }>("SELECT details FROM audit_log WHERE action = 'policy.change' AND target->>'endpoint' = $1", [e]);
    expect(changed.rows[0]?.details).toMatchObject({ breaking: true, acknowledged: true });
  });

  it('audits the refusal of a change whose proposal Postgres cannot store, naming what it was', async () => {
    const e = 'POST /api/policies-hostile';
    const hostile = { scopeMode: 'x\udc00y', liveKeyQuota: '../../etc/passwd', retentionSeconds: { nested: true }, 'bad\u0000name': 1 };
    await expect(changePolicy(db.pool, { service: S, endpoint: e, expectedVersion: 1, fields: hostile, reason: 'hostile input', actor: 'mallory' })).rejects.toBeInstanceOf(InvalidPolicyError);
    const { rows } = await db.pool.query<{ details: { proposed: Record<string, unknown> } }>(
      "SELECT details FROM audit_log WHERE action = 'policy.change_refused' AND target->>'endpoint' = $1",
      [e],
    );
    expect(rows.map((row) => row.details.proposed)).toEqual([{ scopeMode: '(text that cannot be stored)', liveKeyQuota: '../../etc/passwd', retentionSeconds: '(object, not a policy value)' }]);
  });

  it('treats shortening the window as breaking: refused without acknowledgement, flagged with it', async () => {
    const e = endpoint();
    await ensurePolicies(db.pool, S, { [e]: base }, 'system');
    const shorter = { ...base, retryWindowSeconds: 3_600, retentionSeconds: 7_200 };
    await expect(changePolicy(db.pool, { service: S, endpoint: e, fields: shorter, actor: 'bob', reason: 'disk pressure', expectedVersion: 1 })).rejects.toBeInstanceOf(
      BreakingChangeNotAcknowledgedError,
    );
    expect(await policyHistory(db.pool, { service: S, endpoint: e })).toHaveLength(1);
    const result = await changePolicy(db.pool, { service: S, endpoint: e, fields: shorter, actor: 'bob', reason: 'agreed with clients', expectedVersion: 1, acknowledgeBreakingChange: true });
    expect(result.breaking).toBe(true);
    expect((await policyHistory(db.pool, { service: S, endpoint: e }))[0]).toMatchObject({ breaking: true, acknowledged: true, changedBy: 'bob' });
  });

  it('treats changing the scope mode as breaking too', async () => {
    const e = endpoint();
    await ensurePolicies(db.pool, S, { [e]: base }, 'system');
    const intent = { ...base, scopeMode: 'intent' as const };
    await expect(changePolicy(db.pool, { service: S, endpoint: e, fields: intent, actor: 'c', reason: 'multi-step flows', expectedVersion: 1 })).rejects.toThrow(/scope/);
    const result = await changePolicy(db.pool, { service: S, endpoint: e, fields: intent, actor: 'c', reason: 'multi-step flows', expectedVersion: 1, acknowledgeBreakingChange: true });
    expect(result.breaking).toBe(true);
  });

  it('writes the same history, and no audit row, for a default policy whichever path creates it (the server, a service of the package)', async () => {
    const e = endpoint();
    // The server's demo defaults (ensurePolicies, validated first) and a service's createRetrysafe defaults.
    expect(await ensurePolicies(db.pool, 'parity-server', { [e]: base }, 'service:parity-server')).toEqual([e]);
    const policies = new ServicePolicies(db.pool, { service: 'parity-package', defaults: { [e]: toEndpointPolicy(base) } });
    await policies.start();
    await policies.stop();
    const { rows: history } = await db.pool.query<{ service: string; version: number; changed_by: string; reason: string; previous: unknown; current: unknown }>(
      `SELECT service, version, changed_by, reason, previous, current FROM endpoint_policy_history
       WHERE endpoint = $1 AND service IN ('parity-server', 'parity-package') ORDER BY service DESC`,
      [e],
    );
    const { rows: audit } = await db.pool.query<{ service: string; actor: string; action: string; reason: string; details: unknown }>(
      `SELECT target->>'service' AS service, actor, action, reason, details FROM audit_log
       WHERE target->>'endpoint' = $1 AND target->>'service' IN ('parity-server', 'parity-package') ORDER BY target->>'service' DESC`,
      [e],
    );
    const withoutService = (row: { service: string } | undefined) => (row ? (JSON.parse(JSON.stringify(row).replaceAll(row.service, 'SERVICE')) as unknown) : row);
    expect(history).toHaveLength(2);
    // The history entry is the record of a creation: neither path audits it (the audit log is the server's, for the dashboard's actions).
    expect(audit).toEqual([]);
    expect(withoutService(history[0])).toEqual(withoutService(history[1]));
    expect(history[0]).toMatchObject({ version: 1, changed_by: 'service:parity-server', reason: "created with the service's default policy", previous: null });
  });

  it('refuses a change made against a stale version', async () => {
    const e = endpoint();
    await ensurePolicies(db.pool, S, { [e]: base }, 'system');
    await changePolicy(db.pool, { service: S, endpoint: e, fields: { ...base, leaseMs: 60_000 }, actor: 'a', reason: 'slow processor', expectedVersion: 1 });
    await expect(
      changePolicy(db.pool, { service: S, endpoint: e, fields: { ...base, leaseMs: 10_000 }, actor: 'b', reason: 'faster', expectedVersion: 1 }),
    ).rejects.toBeInstanceOf(PolicyVersionConflictError);
  });

  it('keeps each service’s policy of the same endpoint apart: created, changed and versioned on its own', async () => {
    const e = endpoint();
    expect(await ensurePolicies(db.pool, S, { [e]: base }, 'system')).toEqual([e]);
    // The same endpoint string in another service is another policy, created with its own defaults.
    expect(await ensurePolicies(db.pool, 'orders', { [e]: { ...base, leaseMs: 10_000 } }, 'service:orders')).toEqual([e]);
    const longer = { ...base, retryWindowSeconds: 172_800, retentionSeconds: 180_000 };
    await changePolicy(db.pool, { service: 'orders', endpoint: e, fields: { ...longer, leaseMs: 10_000 }, actor: 'olga', reason: 'orders retry longer', expectedVersion: 1 });
    expect(await getPolicy(db.pool, S, e)).toMatchObject({ ...base, service: S, version: 1 });
    expect(await getPolicy(db.pool, 'orders', e)).toMatchObject({ ...longer, leaseMs: 10_000, service: 'orders', version: 2, updatedBy: 'olga' });
    expect(await getPolicy(db.pool, 'billing', e)).toBeNull();
    expect((await policyHistory(db.pool, { service: S, endpoint: e })).map((entry) => [entry.service, entry.version])).toEqual([[S, 1]]);
    expect((await policyHistory(db.pool, { service: 'orders', endpoint: e })).map((entry) => [entry.service, entry.version])).toEqual([
      ['orders', 2],
      ['orders', 1],
    ]);
    // The version a change expects is its own service's.
    await expect(changePolicy(db.pool, { service: S, endpoint: e, fields: longer, actor: 'a', reason: 'stale', expectedVersion: 2 })).rejects.toBeInstanceOf(
      PolicyVersionConflictError,
    );
    await expect(changePolicy(db.pool, { service: 'billing', endpoint: e, fields: longer, actor: 'a', reason: 'none', expectedVersion: 1 })).rejects.toThrow(
      /service billing/,
    );
    expect((await listPolicies(db.pool, 'orders')).map((policy) => [policy.service, policy.endpoint])).toEqual([['orders', e]]);
    expect((await listPolicies(db.pool)).filter((policy) => policy.endpoint === e).map((policy) => policy.service)).toEqual([S, 'orders']);
    expect(await knownScopes(db.pool, 'orders')).toEqual([{ service: 'orders', scope: e }]);
  });

  it('knows each service’s scopes: its endpoint-scoped endpoints, and "intent" once when any of its policies uses it', async () => {
    const [a, b, c] = ['POST /scopes/a', 'POST /scopes/b', 'POST /scopes/c'];
    await ensurePolicies(db.pool, 'scopes-x', { [a]: base, [b]: { ...base, scopeMode: 'intent' }, [c]: { ...base, scopeMode: 'intent' } }, 'system');
    await ensurePolicies(db.pool, 'scopes-y', { [a]: base }, 'system');
    expect(await knownScopes(db.pool, 'scopes-x')).toEqual([
      { service: 'scopes-x', scope: a },
      { service: 'scopes-x', scope: 'intent' },
    ]);
    const all = await knownScopes(db.pool);
    expect(all.filter((scope) => scope.service.startsWith('scopes-'))).toEqual([
      { service: 'scopes-x', scope: a },
      { service: 'scopes-x', scope: 'intent' },
      { service: 'scopes-y', scope: a },
    ]);
  });

  it('keeps the audit log append-only', async () => {
    await db.pool.query("INSERT INTO audit_log (actor, action, target) VALUES ('t', 'test.entry', '{}')");
    await expect(db.pool.query("UPDATE audit_log SET actor = 'x' WHERE action = 'test.entry'")).rejects.toMatchObject({ code: '42501' });
    await expect(db.pool.query("DELETE FROM audit_log WHERE action = 'test.entry'")).rejects.toMatchObject({ code: '42501' });
    await expect(db.pool.query('TRUNCATE audit_log')).rejects.toMatchObject({ code: '42501' });
  });
});
