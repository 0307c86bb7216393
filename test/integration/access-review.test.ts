// The access review (#31 point 6): every operator with role, enabled, created, last sign-in and
// last role change (who, when, why), read through the dashboard's role; the CSV export is
// audited; no password hash, session or token in either.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOperatorAuth, readOperatorSession, signInOperator, type OperatorAuth, type SessionOperator } from '../../server/auth/operator-auth';
import { changeOperator, createOperator } from '../../server/auth/operators';
import { exportAccessReview, readAccessReview } from '../../server/auth/access-review';
import { explainPrepared, planNodes, recordingQueryable } from '../../packages/store/test/helpers/plan';
import { useTestDatabase } from '../helpers/database';

const PASSWORD = 'correct horse battery';

describe('access review', () => {
  const db = useTestDatabase();
  let dashboard: pg.Pool;
  let auth: OperatorAuth;
  let boss: SessionOperator;

  async function signIn(email: string): Promise<SessionOperator> {
    const result = await signInOperator(auth, dashboard, { email, password: PASSWORD }, { headers: new Headers(), address: '192.0.2.7' });
    if (!result.ok) throw new Error(`sign-in failed: ${result.reason}`);
    const operator = await readOperatorSession(auth, new Headers({ cookie: result.setCookie.map((line) => line.split(';')[0]).join('; ') }));
    if (!operator) throw new Error('no session');
    return operator;
  }

  beforeAll(async () => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 4 });
    auth = createOperatorAuth({ pool: db.authPool, secret: 'test-secret-'.padEnd(40, 'x'), baseURL: 'http://localhost:3000', signInHashesPerSecond: 1_000 });
    await createOperator(db.pool, { email: 'review-boss@example.com', password: PASSWORD, role: 'admin' }, { system: 'test' });
    boss = await signIn('review-boss@example.com');
  });
  afterAll(async () => {
    await dashboard.end();
  });

  it('lists each operator with role, last sign-in and last role change with its reason, and never a hash or token', async () => {
    const promoted = await createOperator(dashboard, { email: 'review-promoted@example.com', password: PASSWORD, role: 'viewer' }, boss);
    await createOperator(dashboard, { email: 'review-never@example.com', password: PASSWORD, role: 'operator' }, boss);
    await signIn('review-promoted@example.com');
    await changeOperator(dashboard, promoted.id, { role: 'compliance', reason: 'joins the quarterly audit' }, boss);
    // A disable is not a role change: the last role change stays the promotion.
    await changeOperator(dashboard, promoted.id, { disabled: true, reason: 'on leave' }, boss);

    const review = await readAccessReview(dashboard);
    const byEmail = new Map(review.map((entry) => [entry.email, entry]));
    expect(byEmail.get('review-promoted@example.com')).toMatchObject({
      role: 'compliance',
      enabled: false,
      lastRoleChange: { by: 'review-boss@example.com', from: 'viewer', to: 'compliance', reason: 'joins the quarterly audit' },
    });
    expect(byEmail.get('review-never@example.com')).toMatchObject({ role: 'operator', enabled: true, lastSignInAt: null, lastRoleChange: { by: 'review-boss@example.com', from: null, to: 'operator' } });
    expect(byEmail.get('review-boss@example.com')).toMatchObject({ role: 'admin', lastRoleChange: { by: 'test', from: null, to: 'admin' } });
    expect(byEmail.get('review-promoted@example.com')?.lastSignInAt).toBeInstanceOf(Date);
    expect(byEmail.get('review-boss@example.com')?.lastSignInAt).toBeInstanceOf(Date);

    const csv = await exportAccessReview({ read: dashboard, write: dashboard }, 'review-boss@example.com');
    const [header, ...rows] = csv.trim().split(/\r?\n/);
    expect(header).toBe('email,name,role,enabled,created_at,last_sign_in_at,last_role_change_at,last_role_change_by,last_role_change_from,last_role_change_to,last_role_change_reason');
    expect(rows.find((row) => row.startsWith('review-promoted@example.com,'))).toMatch(/,compliance,false,.*,review-boss@example\.com,viewer,compliance,joins the quarterly audit$/);
    const { rows: audited } = await db.pool.query("SELECT actor, details FROM audit_log WHERE action = 'operators.export'");
    expect(audited).toEqual([{ actor: 'review-boss@example.com', details: { rows: review.length } }]);

    // Nothing secret: no argon2 hash, no session token (or its hash) in the review or its CSV.
    const { rows: secrets } = await db.pool.query<{ value: string }>('SELECT password AS value FROM operator_accounts WHERE password IS NOT NULL UNION ALL SELECT token FROM operator_sessions');
    expect(secrets.length).toBeGreaterThan(0);
    const shown = JSON.stringify(review) + csv;
    expect(shown).not.toContain('$argon2');
    for (const secret of secrets) expect(shown).not.toContain(secret.value);
  });

  it('reads the audit log through its actor and action indexes, not whole, for both plans', async () => {
    // 200,000 audit rows of other actions and actors: a whole scan would be the planner's choice if it could.
    await db.pool.query(
      `INSERT INTO audit_log (actor, action, target, at)
       SELECT 'someone-' || (i % 500) || '@example.com', CASE WHEN i % 2 = 0 THEN 'key.lookup' ELSE 'auth.sign_in' END, '{}'::jsonb, now() - i * interval '1 second'
       FROM generate_series(1, 200000) AS i`,
    );
    await db.pool.query('ANALYZE audit_log');
    const recorded = recordingQueryable(db.pool);
    await readAccessReview(recorded.db);
    const [statement] = recorded.statements;
    if (!statement) throw new Error('no statement');
    const client = await db.pool.connect();
    try {
      for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
        const plan = await explainPrepared(client, statement.text, statement.values, mode);
        const onAudit = plan.flatMap((node) => planNodes(node)).filter((node) => node['Relation Name'] === 'audit_log');
        expect(onAudit.length, mode).toBeGreaterThan(0);
        expect(onAudit.filter((node) => node['Node Type'] === 'Seq Scan'), mode).toEqual([]);
        expect(new Set(onAudit.map((node) => node['Index Name'])), mode).toEqual(new Set(['audit_log_actor_at_idx', 'audit_log_action_at_idx']));
      }
    } finally {
      client.release();
    }
  });
});
