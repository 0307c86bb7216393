// Least privilege, enforced by Postgres: the dashboard's role reads key metadata but never a
// response body, cannot write the store, may only append to the audit log, and releases a
// stale claim only through the SECURITY DEFINER function (which audits it).
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClaimNotStaleError, releaseStaleClaim } from '../../server/retention/stale-claims';
import { layouts, useTestDatabase } from '../helpers/database';
import { changePolicy, ensurePolicies, fieldsOf, getPolicy } from '../../server/retention/policies';
import { defaultPolicyFields } from '../../server/demo/policies';
import { listPartitions } from '../../server/retention/partitions';
import { createTestStore, jsonResult, principal, testPolicy } from '../helpers/store';

const denied = { code: '42501' };

describe.each(layouts)('the dashboard role (%s layout)', (layout) => {
  const db = useTestDatabase(layout);
  let dashboard: pg.Pool;
  const owner = principal();

  beforeAll(async () => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 2 });
    const { store } = createTestStore(db.pool, { layout });
    await store.execute({
      principalId: owner,
      key: 'done-1',
      endpoint: 'POST /a',
      method: 'POST',
      body: { a: 1 },
      policy: testPolicy,
      mode: 'claim-first',
      work: () => Promise.resolve(jsonResult(201, { secret: 'SENTINEL-body' })),
    });
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
       VALUES ($1, 'POST /a', 'crashed-1', 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), now() - interval '1 minute', now() + interval '1 day')`,
      [owner],
    );
  });
  afterAll(async () => {
    await dashboard.end();
  });

  it('reads key metadata but is refused the response body', async () => {
    const { rows } = await dashboard.query<{ state: string; response_status: number; response_size: number }>(
      'SELECT state, response_status, response_size, fingerprint, correlation_id FROM idempotency_keys WHERE principal_id = $1 AND scope = $2 AND key = $3',
      [owner, 'POST /a', 'done-1'],
    );
    expect(rows[0]).toMatchObject({ state: 'completed', response_status: 201 });
    await expect(dashboard.query('SELECT response_body FROM idempotency_keys')).rejects.toMatchObject(denied);
    await expect(dashboard.query('SELECT * FROM idempotency_keys')).rejects.toMatchObject(denied);
    await expect(dashboard.query('SELECT api_key_hash FROM tenants')).rejects.toMatchObject(denied);
    await expect(dashboard.query('SELECT description FROM payments')).rejects.toMatchObject(denied);
  });

  it('cannot write the store', async () => {
    await expect(dashboard.query("UPDATE idempotency_keys SET state = 'failed'")).rejects.toMatchObject(denied);
    await expect(dashboard.query('DELETE FROM idempotency_keys')).rejects.toMatchObject(denied);
    await expect(
      dashboard.query(
        `INSERT INTO idempotency_keys (principal_id, scope, key, state, fingerprint, correlation_id, expires_at)
         VALUES (gen_random_uuid(), 'x', 'y', 'completed', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), now() + interval '1 day')`,
      ),
    ).rejects.toMatchObject(denied);
  });

  it('appends to the audit log but can neither change nor remove an entry', async () => {
    await dashboard.query("INSERT INTO audit_log (actor, action, target) VALUES ('t@example.com', 'test.append', '{}')");
    await expect(dashboard.query("UPDATE audit_log SET actor = 'someone else'")).rejects.toMatchObject(denied);
    await expect(dashboard.query('DELETE FROM audit_log')).rejects.toMatchObject(denied);
    await expect(dashboard.query('TRUNCATE audit_log')).rejects.toMatchObject(denied);
  });

  it('releases a stale claim only through the audited function', async () => {
    const id = { principalId: owner, scope: 'POST /a', key: 'crashed-1' };
    await releaseStaleClaim(dashboard, id, 'op@example.com', 'processor confirmed failure');
    const { rows } = await db.pool.query<{ state: string }>('SELECT state FROM idempotency_keys WHERE key = $1', ['crashed-1']);
    expect(rows[0]?.state).toBe('failed');
    const audit = await db.pool.query<{ actor: string; reason: string }>("SELECT actor, reason FROM audit_log WHERE action = 'stale_claim.release'");
    expect(audit.rows).toEqual([{ actor: 'op@example.com', reason: 'processor confirmed failure' }]);
    // A completed key is not stale: nothing changes, nothing is audited.
    await expect(releaseStaleClaim(dashboard, { ...id, key: 'done-1' }, 'op@example.com', 'x')).rejects.toBeInstanceOf(ClaimNotStaleError);
    await expect(releaseStaleClaim(dashboard, { ...id, principalId: randomUUID() }, 'op@example.com', 'x')).rejects.toBeInstanceOf(ClaimNotStaleError);
    await expect(releaseStaleClaim(dashboard, id, 'op@example.com', '  ')).rejects.toMatchObject({ code: '23514' });
  });

  it('lets an admin change a policy through the role, creating the partitions a longer retention needs', async () => {
    await ensurePolicies(db.pool, defaultPolicyFields, 'test');
    const current = await getPolicy(dashboard, 'POST /api/v1/payments');
    if (!current) throw new Error('no policy');
    const longer = { ...fieldsOf(current), retentionSeconds: 40 * 86_400 };
    const result = await changePolicy(dashboard, { endpoint: 'POST /api/v1/payments', fields: longer, actor: 'admin@example.com', reason: 'clients retry for longer now', expectedVersion: current.version });
    expect(result.policy.retentionSeconds).toBe(40 * 86_400);
    if (layout === 'partitioned') {
      const partitions = await listPartitions(db.pool);
      expect(partitions.length).toBeGreaterThanOrEqual(40);
    }
    const audit = await db.pool.query<{ reason: string }>("SELECT reason FROM audit_log WHERE action = 'policy.change'");
    expect(audit.rows).toEqual([{ reason: 'clients retry for longer now' }]);
    await expect(dashboard.query('SELECT * FROM retrysafe_claim_partitioned(gen_random_uuid(), $1, $2, $3, gen_random_uuid(), 1000, 1000)', ['x', 'y', Buffer.alloc(32)])).rejects.toMatchObject(denied);
  });
});
