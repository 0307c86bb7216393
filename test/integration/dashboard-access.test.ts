// Least privilege, enforced by Postgres: the dashboard's role reads key metadata but never a
// response body, cannot write the store, may only append to the audit log, releases a stale
// claim only through the SECURITY DEFINER function (which audits it), reads operators but
// writes them, their credentials and sessions only through the functions that check the acting
// session, never reads a password hash or session token from a table, and cannot have more
// partitions created than the longest allowed retention needs.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClaimNotStaleError, releaseStaleClaim } from '../../server/retention/stale-claims';
import { postgresKeyAccess } from '../helpers/key-access';
import { layouts, useTestDatabase } from '../helpers/database';
import { AUTH_ROLE } from '../../db/dashboard-access';
import { changePolicy, ensurePolicies, fieldsOf, getPolicy } from '../../server/retention/policies';
import { DEMO_SERVICE, defaultPolicyFields } from '../../server/demo/policies';
import { listPartitions } from '../../server/retention/partitions';
import { createTestStore, jsonResult, principal, testPolicy } from '../../packages/store/test/helpers/store';
import { createOperator } from '../../server/auth/operators';

const denied = { code: '42501' };
const refusedByFunction = { code: 'RS403' };
const invalidParameter = { code: '22023' };

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
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
       VALUES ($1, 'demo', 'POST /a', 'crashed-1', 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), now() - interval '1 minute', now() + interval '1 day')`,
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
        `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, expires_at)
         VALUES (gen_random_uuid(), 'demo', 'x', 'y', 'completed', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), now() + interval '1 day')`,
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
    const id = { principalId: owner, service: DEMO_SERVICE, scope: 'POST /a', key: 'crashed-1' };
    // Another service's (principal, scope, key) is another key: nothing of it is stale.
    await expect(releaseStaleClaim(postgresKeyAccess(dashboard), { ...id, service: 'orders' }, 'op@example.com', 'x')).rejects.toBeInstanceOf(ClaimNotStaleError);
    await releaseStaleClaim(postgresKeyAccess(dashboard), id, 'op@example.com', 'processor confirmed failure');
    const { rows } = await db.pool.query<{ state: string }>('SELECT state FROM idempotency_keys WHERE key = $1', ['crashed-1']);
    expect(rows[0]?.state).toBe('failed');
    const audit = await db.pool.query<{ actor: string; reason: string; target: unknown }>("SELECT actor, reason, target FROM audit_log WHERE action = 'stale_claim.release'");
    expect(audit.rows).toEqual([{ actor: 'op@example.com', reason: 'processor confirmed failure', target: { principalId: owner, service: DEMO_SERVICE, scope: 'POST /a', key: 'crashed-1' } }]);
    // A completed key is not stale: nothing changes, nothing is audited.
    await expect(releaseStaleClaim(postgresKeyAccess(dashboard), { ...id, key: 'done-1' }, 'op@example.com', 'x')).rejects.toBeInstanceOf(ClaimNotStaleError);
    await expect(releaseStaleClaim(postgresKeyAccess(dashboard), { ...id, principalId: randomUUID() }, 'op@example.com', 'x')).rejects.toBeInstanceOf(ClaimNotStaleError);
    await expect(releaseStaleClaim(postgresKeyAccess(dashboard), id, 'op@example.com', '  ')).rejects.toMatchObject({ code: '23514' });
    // Not through the store's own release, which audits nothing (since store migration 0029).
    await expect(
      dashboard.query("SELECT retrysafe.retrysafe_release_stale_claim($1, $2, 'POST /a', 'crashed-2', 'op@example.com', 'unaudited')", [owner, DEMO_SERVICE]),
    ).rejects.toMatchObject(denied);
  });

  it('lets an admin change a policy through the role, creating the partitions a longer retention needs', async () => {
    await ensurePolicies(db.pool, DEMO_SERVICE, defaultPolicyFields, 'test');
    const current = await getPolicy(dashboard, DEMO_SERVICE, 'POST /api/v1/payments');
    if (!current) throw new Error('no policy');
    const longer = { ...fieldsOf(current), retentionSeconds: 40 * 86_400 };
    const result = await changePolicy(dashboard, { service: DEMO_SERVICE, endpoint: 'POST /api/v1/payments', fields: longer, actor: 'admin@example.com', reason: 'clients retry for longer now', expectedVersion: current.version });
    expect(result.policy.retentionSeconds).toBe(40 * 86_400);
    if (layout === 'partitioned') {
      const partitions = await listPartitions(db.pool);
      expect(partitions.length).toBeGreaterThanOrEqual(40);
    }
    const audit = await db.pool.query<{ reason: string }>("SELECT reason FROM audit_log WHERE action = 'policy.change'");
    expect(audit.rows).toEqual([{ reason: 'clients retry for longer now' }]);
    await expect(
      dashboard.query('SELECT * FROM retrysafe_claim_partitioned(gen_random_uuid(), $1, $2, $3, $4, gen_random_uuid(), 1000, 1000)', [DEMO_SERVICE, 'x', 'y', Buffer.alloc(32)]),
    ).rejects.toMatchObject(denied);
  });

  it('cannot change a role, read a password hash or a session token, or forge a session, except through the checked functions', async () => {
    const admin = await createOperator(db.pool, { email: 'admin@access.example', password: 'a long test password', role: 'admin' }, { system: 'test' });
    const viewer = await createOperator(db.pool, { email: 'viewer@access.example', password: 'a long test password', role: 'viewer' }, { system: 'test' });
    await db.pool.query(
      `INSERT INTO operator_sessions (id, token, user_id, expires_at) VALUES ('s-admin', encode(sha256('admin-token'::bytea), 'hex'), $1, now() + interval '1 hour')`,
      [admin.id],
    );
    // Operators are readable (the list, the sign-in's role check) but not writable.
    const { rows } = await dashboard.query<{ role: string }>('SELECT role FROM operators WHERE id = $1', [viewer.id]);
    expect(rows).toEqual([{ role: 'viewer' }]);
    await expect(dashboard.query("UPDATE operators SET role = 'admin' WHERE id = $1", [viewer.id])).rejects.toMatchObject(denied);
    await expect(dashboard.query("INSERT INTO operators (id, name, email, role) VALUES ('x', 'x', 'x@x', 'admin')")).rejects.toMatchObject(denied);
    await expect(dashboard.query('DELETE FROM operators')).rejects.toMatchObject(denied);
    // Credentials, sessions and verifications: no privilege at all.
    await expect(dashboard.query('SELECT password FROM operator_accounts')).rejects.toMatchObject(denied);
    await expect(dashboard.query('UPDATE operator_accounts SET password = NULL')).rejects.toMatchObject(denied);
    await expect(dashboard.query('SELECT token FROM operator_sessions')).rejects.toMatchObject(denied);
    await expect(dashboard.query('SELECT id FROM operator_sessions')).rejects.toMatchObject(denied);
    await expect(
      dashboard.query("INSERT INTO operator_sessions (id, token, user_id, expires_at) VALUES ('forged', 'forged', $1, now() + interval '1 day')", [admin.id]),
    ).rejects.toMatchObject(denied);
    await expect(dashboard.query("UPDATE operator_sessions SET expires_at = 'infinity'")).rejects.toMatchObject(denied);
    await expect(dashboard.query('SELECT * FROM operator_verifications')).rejects.toMatchObject(denied);
    // The functions' helpers are not the dashboard's to call.
    await expect(dashboard.query("SELECT * FROM retrysafe_session_operator('x')")).rejects.toMatchObject(denied);
    await expect(dashboard.query("SELECT retrysafe_acting_admin('x')")).rejects.toMatchObject(denied);
    // A role change, creation or reset needs an enabled admin's live session, by its token's hash.
    const forgedHash = 'f'.repeat(64);
    await expect(dashboard.query("SELECT * FROM retrysafe_operator_change($1, $2, 'admin', NULL, 'escalate')", [forgedHash, viewer.id])).rejects.toMatchObject(refusedByFunction);
    await expect(
      dashboard.query("SELECT * FROM retrysafe_operator_create(NULL, 'system', 'y', 'y2', 'y', 'y@y', 'admin', '$argon2id$v=19$m=19456,t=2,p=1$x$y')"),
    ).rejects.toMatchObject(refusedByFunction);
    await expect(dashboard.query("SELECT * FROM retrysafe_operator_reset_password($1, $2, '$argon2id$x', 'r')", [forgedHash, admin.id])).rejects.toMatchObject(refusedByFunction);
    await expect(dashboard.query("SELECT * FROM retrysafe_operator_change_password($1, '$argon2id$x')", [forgedHash])).rejects.toMatchObject(refusedByFunction);
    // Sessions and credentials are sign-in's role's alone: the dashboard role cannot mint a
    // session for an admin or read a hash, even through the functions.
    await expect(dashboard.query("SELECT * FROM retrysafe_session_create('s1', $1, $2, now() + interval '1 hour', NULL, NULL)", ['a'.repeat(64), admin.id])).rejects.toMatchObject(denied);
    await expect(dashboard.query('SELECT * FROM retrysafe_operator_credential($1)', [admin.id])).rejects.toMatchObject(denied);
    await expect(dashboard.query('SELECT * FROM retrysafe_session_find($1)', [['a'.repeat(64)]])).rejects.toMatchObject(denied);
    await expect(dashboard.query('SELECT retrysafe_session_end($1)', ['a'.repeat(64)])).rejects.toMatchObject(denied);
    // Sign-in's role (the owner's connection in AUTH_ROLE): no session for a disabled operator,
    // none longer than a week, none stored by a token rather than its hash; no body, no write.
    const signIn = db.authPool;
    await db.pool.query('UPDATE operators SET banned = true WHERE id = $1', [viewer.id]);
    await expect(signIn.query("SELECT * FROM retrysafe_session_create('s1', $1, $2, now() + interval '1 hour', NULL, NULL)", ['a'.repeat(64), viewer.id])).rejects.toMatchObject(refusedByFunction);
    await expect(signIn.query("SELECT * FROM retrysafe_session_create('s1', $1, $2, now() + interval '30 days', NULL, NULL)", ['a'.repeat(64), admin.id])).rejects.toMatchObject(invalidParameter);
    await expect(signIn.query("SELECT * FROM retrysafe_session_create('s1', 'plain-token', $1, now() + interval '1 hour', NULL, NULL)", [admin.id])).rejects.toMatchObject(invalidParameter);
    expect((await signIn.query<{ current_user: string }>('SELECT current_user')).rows[0]?.current_user).toBe(AUTH_ROLE);
    await expect(signIn.query('SELECT response_body FROM idempotency_keys LIMIT 1')).rejects.toMatchObject(denied);
    await expect(signIn.query('SELECT password FROM operator_accounts')).rejects.toMatchObject(denied);
    await expect(signIn.query("UPDATE operators SET role = 'admin'")).rejects.toMatchObject(denied);
    await expect(signIn.query("SELECT * FROM retrysafe_operator_change($1, $2, 'admin', NULL, 'escalate')", [forgedHash, viewer.id])).rejects.toMatchObject(denied);
    // With the live session's hash (which only its cookie's holder can compute), the admin's change goes through, audited as that admin.
    const adminHash = (await db.pool.query<{ token: string }>("SELECT token FROM operator_sessions WHERE id = 's-admin'")).rows[0]?.token;
    await db.pool.query('UPDATE operators SET banned = false WHERE id = $1', [viewer.id]);
    await dashboard.query("SELECT * FROM retrysafe_operator_change($1, $2, 'operator', NULL, 'on call now')", [adminHash, viewer.id]);
    const audit = await db.pool.query<{ actor: string }>("SELECT actor FROM audit_log WHERE action = 'operator.role'");
    expect(audit.rows).toEqual([{ actor: 'admin@access.example' }]);
  });

  it('creates partitions only so far ahead: a huge request or retention is refused', async () => {
    for (const pool of [dashboard, db.pool]) {
      await expect(pool.query('SELECT retrysafe_ensure_partitions(1000000)')).rejects.toMatchObject(invalidParameter);
      await expect(pool.query('SELECT retrysafe_ensure_partitions(-1)')).rejects.toMatchObject(invalidParameter);
      await expect(pool.query('SELECT retrysafe_ensure_partitions(31)')).resolves.toBeDefined();
    }
    if (layout === 'partitioned') {
      const before = (await listPartitions(db.pool)).length;
      // The dashboard may update policies; a retention past the 400 days the API allows creates nothing.
      await dashboard.query("UPDATE endpoint_policies SET retention_seconds = 20000 * 86400 WHERE endpoint = 'POST /api/v1/payments'");
      await expect(dashboard.query('SELECT retrysafe_ensure_partitions()')).rejects.toMatchObject(invalidParameter);
      expect((await listPartitions(db.pool)).length).toBe(before);
      await db.pool.query("UPDATE endpoint_policies SET retention_seconds = 40 * 86400 WHERE endpoint = 'POST /api/v1/payments'");
    }
  });
});
