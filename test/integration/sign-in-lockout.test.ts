// Issue #13, point 3: lockout is no longer a denial of service. A stranger's wrong guesses
// lock an account (and a known address) for unknown devices only; a browser the operator has
// signed in from before carries a signed device cookie bound to the account, is throttled on
// its own, and still gets in. Per-address limits apply only when the address is known.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOperatorAuth, signInOperator, type OperatorAuth, type SignInResult } from '../../server/auth/operator-auth';
import { createOperator } from '../../server/auth/operators';
import { useTestDatabase } from '../helpers/database';

const PASSWORD = 'correct horse battery';
const WRONG = 'wrong password!';
const SECRET = 'lockout-test-secret-'.padEnd(40, 'x');

/** The device cookie a successful sign-in set, as a request Cookie header. */
function deviceCookieHeader(result: SignInResult): string {
  if (!result.ok) throw new Error(`sign-in failed: ${result.reason}`);
  const line = result.setCookie.find((cookie) => cookie.startsWith('retrysafe.device='));
  if (!line) throw new Error('no device cookie was set');
  return line.split(';')[0] ?? '';
}

describe('sign-in lockout', () => {
  const db = useTestDatabase();
  let dashboard: pg.Pool;
  let auth: OperatorAuth;
  const from = (address: string | null, cookie?: string) => ({ headers: new Headers(cookie ? { cookie } : {}), address });
  const attempt = (email: string, password: string, request: ReturnType<typeof from>) => signInOperator(auth, dashboard, { email, password }, request);

  beforeAll(async () => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 4 });
    // The unknown-device hashing budget is sign-in-hashing.test.ts's subject; here it must not get in the way.
    auth = createOperatorAuth({ pool: db.authPool, secret: SECRET, baseURL: 'http://localhost:3000', signInHashesPerSecond: 1_000 });
    for (const email of ['ops@lockout.example', 'other@lockout.example', 'shared@lockout.example']) {
      await createOperator(db.pool, { email, password: PASSWORD, role: 'operator' }, { system: 'test' });
    }
  });
  afterAll(async () => {
    await dashboard.end();
  });

  it('locks the account for unknown devices after five wrong guesses, yet lets the operator in from a known device', async () => {
    const device = deviceCookieHeader(await attempt('ops@lockout.example', PASSWORD, from('192.0.2.10')));
    for (let i = 0; i < 5; i += 1) expect(await attempt('ops@lockout.example', WRONG, from(`203.0.113.${i + 1}`))).toEqual({ ok: false, reason: 'invalid' });
    // The sixth guess, and the right password from any unknown device, are refused for 15 minutes.
    expect(await attempt('ops@lockout.example', WRONG, from('203.0.113.9'))).toMatchObject({ ok: false, reason: 'locked' });
    expect(await attempt('ops@lockout.example', PASSWORD, from('192.0.2.10'))).toMatchObject({ ok: false, reason: 'locked' });
    // The operator's own browser still signs in.
    expect(await attempt('ops@lockout.example', PASSWORD, from('192.0.2.10', device))).toMatchObject({ ok: true });
  });

  it('throttles a known device on its own: five wrong passwords lock that device, not the account', async () => {
    await db.pool.query('DELETE FROM sign_in_throttle');
    const first = deviceCookieHeader(await attempt('other@lockout.example', PASSWORD, from('192.0.2.20')));
    const second = deviceCookieHeader(await attempt('other@lockout.example', PASSWORD, from('192.0.2.21')));
    for (let i = 0; i < 5; i += 1) expect(await attempt('other@lockout.example', WRONG, from('192.0.2.20', first))).toEqual({ ok: false, reason: 'invalid' });
    expect(await attempt('other@lockout.example', PASSWORD, from('192.0.2.20', first))).toMatchObject({ ok: false, reason: 'locked' });
    expect(await attempt('other@lockout.example', PASSWORD, from('192.0.2.21', second))).toMatchObject({ ok: true });
    expect(await attempt('other@lockout.example', PASSWORD, from('192.0.2.22'))).toMatchObject({ ok: true });
  });

  it('treats a device cookie of another account, or a tampered one, as an unknown device', async () => {
    await db.pool.query('DELETE FROM sign_in_throttle');
    const others = deviceCookieHeader(await attempt('other@lockout.example', PASSWORD, from('192.0.2.30')));
    const tampered = `${others.slice(0, -2)}${others.endsWith('AA') ? 'BB' : 'AA'}`;
    for (let i = 0; i < 5; i += 1) expect(await attempt('shared@lockout.example', WRONG, from('192.0.2.30', i % 2 ? others : tampered))).toEqual({ ok: false, reason: 'invalid' });
    expect(await attempt('shared@lockout.example', PASSWORD, from('192.0.2.30', others))).toMatchObject({ ok: false, reason: 'locked' });
    expect(await attempt('shared@lockout.example', PASSWORD, from('192.0.2.30', tampered))).toMatchObject({ ok: false, reason: 'locked' });
  });

  it('locks a known address after twenty failures for unknown devices only; an operator behind it with a known device gets in', async () => {
    await db.pool.query('DELETE FROM sign_in_throttle');
    const device = deviceCookieHeader(await attempt('shared@lockout.example', PASSWORD, from('198.51.100.1')));
    for (let i = 0; i < 20; i += 1) expect(await attempt(`nobody-${i}@lockout.example`, WRONG, from('198.51.100.1'))).toEqual({ ok: false, reason: 'invalid' });
    expect(await attempt('nobody-x@lockout.example', WRONG, from('198.51.100.1'))).toMatchObject({ ok: false, reason: 'locked' });
    expect(await attempt('ops@lockout.example', PASSWORD, from('198.51.100.1'))).toMatchObject({ ok: false, reason: 'locked' });
    expect(await attempt('shared@lockout.example', PASSWORD, from('198.51.100.1', device))).toMatchObject({ ok: true });
  });

  it('applies no per-address limit when the address is not known', async () => {
    await db.pool.query('DELETE FROM sign_in_throttle');
    const results = [];
    for (let i = 0; i < 25; i += 1) results.push(await attempt(`stranger-${i}@lockout.example`, WRONG, from(null)));
    expect(results.every((result) => !result.ok && result.reason === 'invalid')).toBe(true);
    expect(await attempt('other@lockout.example', PASSWORD, from(null))).toMatchObject({ ok: true });
  });
});
