// Operator accounts through the dashboard's restricted role: argon2id credentials, sign-in
// in one transaction with its audit row, throttling and lockout, sign-out and disabling
// that end sessions server-side at once, and every change audited.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOperatorAuth, readOperatorSession, signInOperator, signOutOperator, type OperatorAuth } from '../../server/auth/operator-auth';
import { changeOperator, createOperator, LastAdminError, OperatorExistsError } from '../../server/auth/operators';
import { useTestDatabase } from '../helpers/database';
import { pruneThrottle } from '../../server/auth/throttle';

const PASSWORD = 'correct horse battery';
const limits = { accountFailures: 3, addressFailures: 10, windowSeconds: 900, lockSeconds: 900 };

/** A request's headers carrying the cookies a sign-in set. */
function withCookies(setCookie: string[]): Headers {
  return new Headers({ cookie: setCookie.map((line) => line.split(';')[0]).join('; ') });
}

describe('operators', () => {
  const db = useTestDatabase();
  let dashboard: pg.Pool;
  let auth: OperatorAuth;
  const request = (address: string | null = '192.0.2.1') => ({ headers: new Headers(), address });

  beforeAll(() => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 4 });
    auth = createOperatorAuth({ pool: dashboard, secret: 'test-secret-'.padEnd(40, 'x'), baseURL: 'http://localhost:3000', signInHashesPerSecond: 1_000 });
  });
  afterAll(async () => {
    await dashboard.end();
  });

  it('creates an operator with an argon2id hash, audited, and refuses a duplicate email', async () => {
    const created = await createOperator(dashboard, { email: 'Ops@Example.com', password: PASSWORD, role: 'operator' }, 'cli');
    expect(created).toMatchObject({ email: 'ops@example.com', role: 'operator', disabled: false });
    const { rows } = await db.pool.query<{ password: string }>('SELECT password FROM operator_accounts WHERE user_id = $1', [created.id]);
    expect(rows[0]?.password).toMatch(/^\$argon2id\$/);
    await expect(createOperator(dashboard, { email: 'ops@example.com', password: PASSWORD, role: 'viewer' }, 'cli')).rejects.toBeInstanceOf(OperatorExistsError);
    await expect(createOperator(dashboard, { email: 'short@example.com', password: 'short', role: 'viewer' }, 'cli')).rejects.toThrow(/12 characters/);
    const audit = await db.pool.query<{ actor: string; action: string }>("SELECT actor, action FROM audit_log WHERE action = 'operator.create'");
    expect(audit.rows).toEqual([{ actor: 'cli', action: 'operator.create' }]);
  });

  it('signs in, reads the session on every request, and signs out server-side', async () => {
    const result = await signInOperator(auth, dashboard, { email: 'ops@example.com', password: PASSWORD }, request());
    if (!result.ok) throw new Error(`sign-in failed: ${result.reason}`);
    const cookie = result.setCookie.find((line) => line.startsWith('retrysafe.session_token='));
    expect(cookie).toMatch(/HttpOnly/i);
    expect(cookie).toMatch(/SameSite=Strict/i);
    const headers = withCookies(result.setCookie);
    expect(await readOperatorSession(auth, headers)).toMatchObject({ email: 'ops@example.com', role: 'operator' });
    const signIns = await db.pool.query<{ actor: string }>("SELECT actor FROM audit_log WHERE action = 'auth.sign_in'");
    expect(signIns.rows).toEqual([{ actor: 'ops@example.com' }]);
    await signOutOperator(auth, dashboard, headers);
    expect(await readOperatorSession(auth, headers)).toBeNull();
    const { rows } = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM operator_sessions');
    expect(rows[0]?.n).toBe(0);
  });

  it('ends a session at its absolute lifetime from sign-in, however recently it was used', async () => {
    const result = await signInOperator(auth, dashboard, { email: 'ops@example.com', password: PASSWORD }, request());
    if (!result.ok) throw new Error(`sign-in failed: ${result.reason}`);
    const headers = withCookies(result.setCookie);
    // Signed in 7 h 59 min ago and used a moment ago: still valid (the default is 8 h).
    await db.pool.query("UPDATE operator_sessions SET created_at = now() - interval '7 hours 59 minutes', updated_at = now()");
    expect(await readOperatorSession(auth, headers)).not.toBeNull();
    // Past 8 h from sign-in: ended, although its idle expiry is hours away.
    await db.pool.query("UPDATE operator_sessions SET created_at = now() - interval '8 hours 1 minute', expires_at = now() + interval '7 hours'");
    expect(await readOperatorSession(auth, headers)).toBeNull();
    // Configurable: an auth with a 9 h lifetime still accepts it.
    const longer = createOperatorAuth({ pool: dashboard, secret: 'test-secret-'.padEnd(40, 'x'), baseURL: 'http://localhost:3000', absoluteSessionSeconds: 9 * 3_600 });
    expect(await readOperatorSession(longer, headers)).not.toBeNull();
    await signOutOperator(auth, dashboard, headers);
  });

  it('throttles: wrong passwords are audited, then the account is locked even for the right one', async () => {
    for (let attempt = 0; attempt < limits.accountFailures; attempt += 1) {
      expect(await signInOperator(auth, dashboard, { email: 'ops@example.com', password: 'wrong password!' }, request(), limits)).toEqual({ ok: false, reason: 'invalid' });
    }
    const locked = await signInOperator(auth, dashboard, { email: 'ops@example.com', password: PASSWORD }, request('198.51.100.7'), limits);
    expect(locked).toMatchObject({ ok: false, reason: 'locked' });
    if (!locked.ok && locked.reason === 'locked') expect(locked.retryAfterSeconds).toBeGreaterThan(800);
    // Failures and refusals are counted in aggregated rows (occurrences); the lockout is one row.
    const { rows } = await db.pool.query<{ action: string; n: number }>(
      "SELECT action, sum(occurrences)::int AS n FROM audit_log WHERE action LIKE 'auth.sign_in_%' GROUP BY action ORDER BY action",
    );
    expect(rows).toEqual([
      { action: 'auth.sign_in_failed', n: 3 },
      { action: 'auth.sign_in_locked', n: 1 },
      { action: 'auth.sign_in_refused', n: 1 },
    ]);
    const sessions = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM operator_sessions');
    expect(sessions.rows[0]?.n).toBe(0);
    await db.pool.query('DELETE FROM sign_in_throttle');
  });

  it('counts a burst of parallel attempts before checking any password, so at most the limit are checked', async () => {
    await createOperator(dashboard, { email: 'burst@example.com', password: PASSWORD, role: 'viewer' }, 'cli');
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => signInOperator(auth, dashboard, { email: 'burst@example.com', password: `wrong password ${i}` }, request(`198.51.100.${i}`), limits)),
    );
    // Password hashing is bounded too (sign-in-hashing.test.ts): the rest are locked out or refused as busy.
    const checked = results.filter((result) => !result.ok && result.reason === 'invalid').length;
    expect(checked).toBeGreaterThan(0);
    expect(checked).toBeLessThanOrEqual(limits.accountFailures);
    expect(results.filter((result) => !result.ok && (result.reason === 'locked' || result.reason === 'busy'))).toHaveLength(12 - checked);
    const { rows } = await db.pool.query<{ n: number }>("SELECT sum(occurrences)::int AS n FROM audit_log WHERE action = 'auth.sign_in_failed' AND actor = 'burst@example.com'");
    expect(rows[0]?.n).toBe(checked);
    await db.pool.query('DELETE FROM sign_in_throttle');
  });

  it('prunes throttle rows whose window ended and whose lock, if any, is over; never a live one', async () => {
    await db.pool.query(
      `INSERT INTO sign_in_throttle (subject, failures, window_started_at, locked_until) VALUES
         ('ip:203.0.113.1', 3, now() - interval '2 hours', NULL),
         ('ip:203.0.113.2', 20, now() - interval '2 hours', now() - interval '1 hour'),
         ('ip:203.0.113.3', 20, now() - interval '2 hours', now() + interval '5 minutes'),
         ('ip:203.0.113.4', 2, now() - interval '1 minute', NULL)`,
    );
    expect(await pruneThrottle(db.pool, limits)).toBe(2);
    const { rows } = await db.pool.query<{ subject: string }>('SELECT subject FROM sign_in_throttle ORDER BY subject');
    expect(rows.map((row) => row.subject)).toEqual(['ip:203.0.113.3', 'ip:203.0.113.4']);
    expect(await pruneThrottle(db.pool, limits)).toBe(0);
    await db.pool.query('DELETE FROM sign_in_throttle');
  });

  it('refuses input it cannot take as a failed sign-in, not an error', async () => {
    await expect(signInOperator(auth, dashboard, { email: `${'x'.repeat(300)}@example.com`, password: PASSWORD }, request())).resolves.toEqual({ ok: false, reason: 'invalid' });
  });

  it('ends a disabled operator\'s live session at once and refuses new ones', async () => {
    const created = await createOperator(dashboard, { email: 'leaver@example.com', password: PASSWORD, role: 'compliance' }, 'admin@example.com');
    const result = await signInOperator(auth, dashboard, { email: 'leaver@example.com', password: PASSWORD }, request());
    if (!result.ok) throw new Error('sign-in failed');
    const headers = withCookies(result.setCookie);
    expect(await readOperatorSession(auth, headers)).not.toBeNull();
    const changed = await changeOperator(dashboard, created.id, { disabled: true, reason: 'left the team' }, 'admin@example.com');
    expect(changed.disabled).toBe(true);
    expect(await readOperatorSession(auth, headers)).toBeNull();
    expect(await signInOperator(auth, dashboard, { email: 'leaver@example.com', password: PASSWORD }, request())).toEqual({ ok: false, reason: 'invalid' });
    const { rows } = await db.pool.query<{ reason: string; details: { sessionsEnded: number } }>("SELECT reason, details FROM audit_log WHERE action = 'operator.disable'");
    expect(rows).toEqual([{ reason: 'left the team', details: expect.objectContaining({ sessionsEnded: 1 }) as unknown }]);
    const role = await changeOperator(dashboard, created.id, { role: 'viewer', disabled: false, reason: 'came back' }, 'admin@example.com');
    expect(role).toMatchObject({ role: 'viewer', disabled: false });
  });

  it('never leaves the dashboard without an enabled admin', async () => {
    const only = await createOperator(dashboard, { email: 'root@example.com', password: PASSWORD, role: 'admin' }, 'system');
    await expect(changeOperator(dashboard, only.id, { disabled: true, reason: 'oops' }, 'root@example.com')).rejects.toBeInstanceOf(LastAdminError);
    await expect(changeOperator(dashboard, only.id, { role: 'viewer', reason: 'oops' }, 'root@example.com')).rejects.toBeInstanceOf(LastAdminError);
    const second = await createOperator(dashboard, { email: 'second@example.com', password: PASSWORD, role: 'admin' }, 'root@example.com');
    // Two admins demoting each other at once: one of them must fail.
    const results = await Promise.allSettled([
      changeOperator(dashboard, only.id, { role: 'viewer', reason: 'swap' }, 'second@example.com'),
      changeOperator(dashboard, second.id, { role: 'viewer', reason: 'swap' }, 'root@example.com'),
    ]);
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(1);
    const { rows } = await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM operators WHERE role = 'admin' AND NOT banned");
    expect(rows[0]?.n).toBe(1);
  });
});
