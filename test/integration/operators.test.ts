// Operator accounts through the dashboard's restricted role: argon2id credentials, sign-in
// in one transaction with its audit row, throttling and lockout, sign-out and disabling
// that end sessions server-side at once, and every change audited.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOperatorAuth, readOperatorSession, signInOperator, signOutOperator, type OperatorAuth } from '../../server/auth/operator-auth';
import { createHash } from 'node:crypto';
import { ActorRefusedError, changeOperator, changeOwnPassword, createOperator, LastAdminError, OperatorExistsError, OwnPasswordResetError, resetOperatorPassword, WrongPasswordError } from '../../server/auth/operators';
import type { SessionOperator } from '../../server/auth/operator-auth';
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

  /** The admin the dashboard's operator changes act as (their session is checked by the database). */
  let boss: SessionOperator;

  async function signedIn(email: string, password = PASSWORD): Promise<{ headers: Headers; operator: SessionOperator }> {
    const result = await signInOperator(auth, dashboard, { email, password }, request());
    if (!result.ok) throw new Error(`sign-in failed: ${result.reason}`);
    const headers = withCookies(result.setCookie);
    const operator = await readOperatorSession(auth, headers);
    if (!operator) throw new Error('no session');
    return { headers, operator };
  }

  beforeAll(async () => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 4 });
    auth = createOperatorAuth({ pool: db.authPool, secret: 'test-secret-'.padEnd(40, 'x'), baseURL: 'http://localhost:3000', signInHashesPerSecond: 1_000 });
    await createOperator(db.pool, { email: 'boss@example.com', password: PASSWORD, role: 'admin' }, { system: 'test' });
    boss = (await signedIn('boss@example.com')).operator;
  });
  afterAll(async () => {
    await dashboard.end();
  });

  it('creates an operator with an argon2id hash, audited, and refuses a duplicate email', async () => {
    // Without an admin session only the owner may create one (the CLI, the first admin).
    await expect(createOperator(dashboard, { email: 'Ops@Example.com', password: PASSWORD, role: 'operator' }, { system: 'cli' })).rejects.toBeInstanceOf(ActorRefusedError);
    const created = await createOperator(db.pool, { email: 'Ops@Example.com', password: PASSWORD, role: 'operator' }, { system: 'cli' });
    expect(created).toMatchObject({ email: 'ops@example.com', role: 'operator', disabled: false });
    const { rows } = await db.pool.query<{ password: string }>('SELECT password FROM operator_accounts WHERE user_id = $1', [created.id]);
    expect(rows[0]?.password).toMatch(/^\$argon2id\$/);
    await expect(createOperator(dashboard, { email: 'ops@example.com', password: PASSWORD, role: 'viewer' }, boss)).rejects.toBeInstanceOf(OperatorExistsError);
    await expect(createOperator(dashboard, { email: 'short@example.com', password: 'short', role: 'viewer' }, boss)).rejects.toThrow(/12 characters/);
    // From the dashboard, the audit row names the admin whose session the database checked.
    await createOperator(dashboard, { email: 'new@example.com', password: PASSWORD, role: 'viewer' }, boss);
    const audit = await db.pool.query<{ actor: string; email: string }>(
      "SELECT actor, target->>'email' AS email FROM audit_log WHERE action = 'operator.create' AND actor <> 'test' ORDER BY id",
    );
    expect(audit.rows).toEqual([
      { actor: 'cli', email: 'ops@example.com' },
      { actor: 'boss@example.com', email: 'new@example.com' },
    ]);
  });

  it('signs in, reads the session on every request, and signs out server-side', async () => {
    const result = await signInOperator(auth, dashboard, { email: 'ops@example.com', password: PASSWORD }, request());
    if (!result.ok) throw new Error(`sign-in failed: ${result.reason}`);
    const cookie = result.setCookie.find((line) => line.startsWith('retrysafe.session_token='));
    expect(cookie).toMatch(/HttpOnly/i);
    expect(cookie).toMatch(/SameSite=Strict/i);
    const headers = withCookies(result.setCookie);
    expect(await readOperatorSession(auth, headers)).toMatchObject({ email: 'ops@example.com', role: 'operator' });
    const signIns = await db.pool.query<{ actor: string }>("SELECT actor FROM audit_log WHERE action = 'auth.sign_in' AND actor <> 'boss@example.com'");
    expect(signIns.rows).toEqual([{ actor: 'ops@example.com' }]);
    await signOutOperator(auth, dashboard, headers);
    expect(await readOperatorSession(auth, headers)).toBeNull();
    const { rows } = await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM operator_sessions s JOIN operators o ON o.id = s.user_id WHERE o.email = 'ops@example.com'");
    expect(rows[0]?.n).toBe(0);
  });

  it('stores a session by the SHA-256 of its token, never the token itself', async () => {
    const { headers } = await signedIn('ops@example.com');
    const cookie = headers.get('cookie') ?? '';
    // The cookie carries "<token>.<signature>", URL-encoded.
    const token = decodeURIComponent(/retrysafe\.session_token=([^;]+)/.exec(cookie)?.[1] ?? '').split('.')[0] ?? '';
    expect(token.length).toBeGreaterThanOrEqual(32);
    const { rows } = await db.pool.query<{ token: string }>("SELECT s.token FROM operator_sessions s JOIN operators o ON o.id = s.user_id WHERE o.email = 'ops@example.com'");
    expect(rows).toEqual([{ token: createHash('sha256').update(token).digest('hex') }]);
    await signOutOperator(auth, dashboard, headers);
  });

  it('extends a session used after its first hour through the session function (no "don\'t remember me" cookie)', async () => {
    const { headers } = await signedIn('ops@example.com');
    const sessionOnly = new Headers({ cookie: (headers.get('cookie') ?? '').split('; ').filter((pair) => pair.startsWith('retrysafe.session_token=')).join('; ') });
    const mine = "user_id = (SELECT id FROM operators WHERE email = 'ops@example.com')";
    await db.pool.query(`UPDATE operator_sessions SET expires_at = now() + interval '1 hour' WHERE ${mine}`);
    expect(await readOperatorSession(auth, sessionOnly)).toMatchObject({ email: 'ops@example.com' });
    const { rows } = await db.pool.query<{ hours: number }>(`SELECT (extract(epoch FROM expires_at - now()) / 3600)::float8 AS hours FROM operator_sessions WHERE ${mine}`);
    expect(rows[0]?.hours).toBeGreaterThan(7.9);
    await signOutOperator(auth, dashboard, headers);
  });

  it('ends a session at its absolute lifetime from sign-in, however recently it was used', async () => {
    const result = await signInOperator(auth, dashboard, { email: 'ops@example.com', password: PASSWORD }, request());
    if (!result.ok) throw new Error(`sign-in failed: ${result.reason}`);
    const headers = withCookies(result.setCookie);
    const mine = "user_id = (SELECT id FROM operators WHERE email = 'ops@example.com')";
    // Signed in 7 h 59 min ago and used a moment ago: still valid (the default is 8 h).
    await db.pool.query(`UPDATE operator_sessions SET created_at = now() - interval '7 hours 59 minutes', updated_at = now() WHERE ${mine}`);
    expect(await readOperatorSession(auth, headers)).not.toBeNull();
    // Past 8 h from sign-in: ended, although its idle expiry is hours away.
    await db.pool.query(`UPDATE operator_sessions SET created_at = now() - interval '8 hours 1 minute', expires_at = now() + interval '7 hours' WHERE ${mine}`);
    expect(await readOperatorSession(auth, headers)).toBeNull();
    // Configurable: an auth with a 9 h lifetime still accepts it.
    const longer = createOperatorAuth({ pool: db.authPool, secret: 'test-secret-'.padEnd(40, 'x'), baseURL: 'http://localhost:3000', absoluteSessionSeconds: 9 * 3_600 });
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
    const sessions = await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM operator_sessions s JOIN operators o ON o.id = s.user_id WHERE o.email = 'ops@example.com'");
    expect(sessions.rows[0]?.n).toBe(0);
    await db.pool.query('DELETE FROM sign_in_throttle');
  });

  it('counts a burst of parallel attempts before checking any password, so at most the limit are checked', async () => {
    await createOperator(db.pool, { email: 'burst@example.com', password: PASSWORD, role: 'viewer' }, { system: 'cli' });
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
    const created = await createOperator(dashboard, { email: 'leaver@example.com', password: PASSWORD, role: 'compliance' }, boss);
    const result = await signInOperator(auth, dashboard, { email: 'leaver@example.com', password: PASSWORD }, request());
    if (!result.ok) throw new Error('sign-in failed');
    const headers = withCookies(result.setCookie);
    expect(await readOperatorSession(auth, headers)).not.toBeNull();
    const changed = await changeOperator(dashboard, created.id, { disabled: true, reason: 'left the team' }, boss);
    expect(changed.disabled).toBe(true);
    expect(await readOperatorSession(auth, headers)).toBeNull();
    expect(await signInOperator(auth, dashboard, { email: 'leaver@example.com', password: PASSWORD }, request())).toEqual({ ok: false, reason: 'invalid' });
    const { rows } = await db.pool.query<{ actor: string; reason: string; details: { sessionsEnded: number } }>("SELECT actor, reason, details FROM audit_log WHERE action = 'operator.disable'");
    expect(rows).toEqual([{ actor: 'boss@example.com', reason: 'left the team', details: expect.objectContaining({ sessionsEnded: 1 }) as unknown }]);
    const role = await changeOperator(dashboard, created.id, { role: 'viewer', disabled: false, reason: 'came back' }, boss);
    expect(role).toMatchObject({ role: 'viewer', disabled: false });
  });

  it('never leaves the dashboard without an enabled admin', async () => {
    // boss is the only admin.
    await expect(changeOperator(dashboard, boss.id, { disabled: true, reason: 'oops' }, boss)).rejects.toBeInstanceOf(LastAdminError);
    await expect(changeOperator(dashboard, boss.id, { role: 'viewer', reason: 'oops' }, boss)).rejects.toBeInstanceOf(LastAdminError);
    await createOperator(dashboard, { email: 'second@example.com', password: PASSWORD, role: 'admin' }, boss);
    const second = (await signedIn('second@example.com')).operator;
    // Two admins demoting each other at once: one of them must fail.
    const results = await Promise.allSettled([
      changeOperator(dashboard, boss.id, { role: 'viewer', reason: 'swap' }, second),
      changeOperator(dashboard, second.id, { role: 'viewer', reason: 'swap' }, boss),
    ]);
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(1);
    const { rows } = await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM operators WHERE role = 'admin' AND NOT banned");
    expect(rows[0]?.n).toBe(1);
    // Whoever lost admin acts as admin no more, session or not.
    const [loser, winner] = results[0].status === 'fulfilled' ? [boss, second] : [second, boss];
    await expect(changeOperator(dashboard, winner.id, { role: 'viewer', reason: 'revenge' }, loser)).rejects.toBeInstanceOf(ActorRefusedError);
    // Restore boss as the admin the later tests act as.
    if (loser === boss) await changeOperator(dashboard, boss.id, { role: 'admin', reason: 'restore' }, winner);
  });

  it('changes your own password: the current one is required, your other sessions end, and it is audited', async () => {
    await createOperator(db.pool, { email: 'self@example.com', password: PASSWORD, role: 'viewer' }, { system: 'test' });
    const here = await signedIn('self@example.com');
    const elsewhere = await signedIn('self@example.com');
    const next = 'a brand new passphrase';
    await expect(changeOwnPassword(dashboard, db.authPool, here.operator, { currentPassword: 'not my password', newPassword: next, confirmation: next })).rejects.toBeInstanceOf(WrongPasswordError);
    await expect(changeOwnPassword(dashboard, db.authPool, here.operator, { currentPassword: PASSWORD, newPassword: 'short', confirmation: 'short' })).rejects.toThrow(/12 characters/);
    await expect(changeOwnPassword(dashboard, db.authPool, here.operator, { currentPassword: PASSWORD, newPassword: next, confirmation: `${next}!` })).rejects.toThrow(/does not match/);
    expect(await changeOwnPassword(dashboard, db.authPool, here.operator, { currentPassword: PASSWORD, newPassword: next, confirmation: next })).toEqual({ otherSessionsEnded: 1 });
    expect(await readOperatorSession(auth, here.headers)).not.toBeNull();
    expect(await readOperatorSession(auth, elsewhere.headers)).toBeNull();
    expect(await signInOperator(auth, dashboard, { email: 'self@example.com', password: PASSWORD }, request())).toEqual({ ok: false, reason: 'invalid' });
    const again = await signedIn('self@example.com', next);
    const { rows } = await db.pool.query<{ actor: string; details: unknown }>("SELECT actor, details FROM audit_log WHERE action = 'operator.password_change'");
    expect(rows).toEqual([{ actor: 'self@example.com', details: { otherSessionsEnded: 1 } }]);
    // A session that has ended changes nothing.
    await signOutOperator(auth, dashboard, here.headers);
    await expect(changeOwnPassword(dashboard, db.authPool, here.operator, { currentPassword: next, newPassword: PASSWORD, confirmation: PASSWORD })).rejects.toBeInstanceOf(ActorRefusedError);
    await signOutOperator(auth, dashboard, again.headers);
    await db.pool.query('DELETE FROM sign_in_throttle');
  });

  it('lets an admin reset a password to a generated one, shown once, ending that operator\'s sessions; audited; never their own', async () => {
    const target = await createOperator(db.pool, { email: 'forgot@example.com', password: PASSWORD, role: 'operator' }, { system: 'test' });
    const theirs = await signedIn('forgot@example.com');
    const viewer = (await signedIn('self@example.com', 'a brand new passphrase')).operator;
    await expect(resetOperatorPassword(dashboard, target.id, { reason: 'ticket 12' }, viewer)).rejects.toBeInstanceOf(ActorRefusedError);
    await expect(resetOperatorPassword(dashboard, boss.id, { reason: 'mine' }, boss)).rejects.toBeInstanceOf(OwnPasswordResetError);
    const reset = await resetOperatorPassword(dashboard, target.id, { reason: 'forgot it, ticket 12' }, boss);
    expect(reset).toMatchObject({ email: 'forgot@example.com', sessionsEnded: 1 });
    expect(reset.password.length).toBeGreaterThanOrEqual(12);
    expect(await readOperatorSession(auth, theirs.headers)).toBeNull();
    expect(await signInOperator(auth, dashboard, { email: 'forgot@example.com', password: PASSWORD }, request())).toEqual({ ok: false, reason: 'invalid' });
    await signedIn('forgot@example.com', reset.password);
    const { rows } = await db.pool.query<{ actor: string; reason: string; details: unknown; text: string }>(
      "SELECT actor, reason, details, audit_log::text AS text FROM audit_log WHERE action = 'operator.password_reset'",
    );
    expect(rows).toEqual([{ actor: 'boss@example.com', reason: 'forgot it, ticket 12', details: { sessionsEnded: 1 }, text: expect.any(String) as unknown }]);
    // The new password is nowhere in the audit log.
    expect(rows[0]?.text).not.toContain(reset.password);
    await db.pool.query('DELETE FROM sign_in_throttle');
  });
});
