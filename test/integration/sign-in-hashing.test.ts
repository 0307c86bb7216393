// Issue #13, point 2 (in one process): password hashing is bounded. A burst of sign-ins gets
// one hash running and one waiting; the rest are refused at once as busy, before anything is
// counted or audited. A sign-in for an unknown email costs what a known one costs.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOperatorAuth, signInOperator, type OperatorAuth } from '../../server/auth/operator-auth';
import { createOperator } from '../../server/auth/operators';
import { ARGON2ID_PARAMETERS, argon2OperationCount, UNKNOWN_DEVICE_HASHES_PER_SECOND } from '../../server/auth/passwords';
import { useTestDatabase } from '../helpers/database';

const PASSWORD = 'correct horse battery';
const SECRET = 'hashing-test-secret-'.padEnd(40, 'x');
const roomy = { accountFailures: 1_000, addressFailures: 10_000, windowSeconds: 900, lockSeconds: 900 };


describe('bounded password hashing', () => {
  const db = useTestDatabase();
  let dashboard: pg.Pool;
  let auth: OperatorAuth;

  beforeAll(async () => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 8 });
    auth = createOperatorAuth({ pool: db.authPool, secret: SECRET, baseURL: 'http://localhost:3000', signInHashesPerSecond: 1_000 });
    await createOperator(db.pool, { email: 'ops@hashing.example', password: PASSWORD, role: 'operator' }, { system: 'test' });
  });
  afterAll(async () => {
    await dashboard.end();
  });

  it('checks at most two of twelve simultaneous sign-ins and refuses the rest as busy, uncounted', async () => {
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => signInOperator(auth, dashboard, { email: 'ops@hashing.example', password: `wrong ${i}` }, { headers: new Headers(), address: `192.0.2.${i + 1}` }, roomy)),
    );
    const busy = results.flatMap((result) => (!result.ok && result.reason === 'busy' ? [result.retryAfterSeconds] : []));
    expect(results.filter((result) => !result.ok && result.reason === 'invalid')).toHaveLength(2);
    expect(busy).toHaveLength(10);
    expect(busy.every((seconds) => seconds >= 1)).toBe(true);
    // Busy refusals touched nothing: two attempts counted against the account, two in the audit row.
    const { rows } = await db.pool.query<{ failures: number }>("SELECT failures FROM sign_in_throttle WHERE subject = 'email:ops@hashing.example'");
    expect(rows).toEqual([{ failures: 2 }]);
    const audit = await db.pool.query<{ n: number }>("SELECT coalesce(sum(occurrences), 0)::int AS n FROM audit_log WHERE action LIKE 'auth.sign_in_%'");
    expect(audit.rows[0]?.n).toBe(2);
    // Once they are done, the next sign-in is checked again.
    expect(await signInOperator(auth, dashboard, { email: 'ops@hashing.example', password: PASSWORD }, { headers: new Headers(), address: '192.0.2.99' }, roomy)).toMatchObject({ ok: true });
  });

  it('draws sign-ins from unknown devices on a budget of a few a second, which a known device skips', async () => {
    const known = await signInOperator(auth, dashboard, { email: 'ops@hashing.example', password: PASSWORD }, { headers: new Headers(), address: '192.0.2.50' }, roomy);
    if (!known.ok) throw new Error('sign-in failed');
    const device = known.setCookie.find((line) => line.startsWith('retrysafe.device='))?.split(';')[0] ?? '';
    // The product's default budget (4 a second, burst 4), on an auth of its own.
    const budgeted = createOperatorAuth({ pool: db.authPool, secret: SECRET, baseURL: 'http://localhost:3000', signInHashesPerSecond: UNKNOWN_DEVICE_HASHES_PER_SECOND });
    const reasons: string[] = [];
    for (let i = 0; i < 10; i += 1) {
      const result = await signInOperator(budgeted, dashboard, { email: `nobody-${i}@hashing.example`, password: 'a bogus password' }, { headers: new Headers(), address: '192.0.2.51' }, roomy);
      reasons.push(result.ok ? 'ok' : result.reason);
    }
    expect(reasons.filter((reason) => reason === 'invalid').length).toBeGreaterThanOrEqual(4);
    expect(reasons.filter((reason) => reason === 'busy').length).toBeGreaterThan(0);
    // The budget is spent, yet the operator's own browser is checked (and signs in).
    expect(await signInOperator(budgeted, dashboard, { email: 'ops@hashing.example', password: PASSWORD }, { headers: new Headers({ cookie: device }), address: '192.0.2.50' }, roomy)).toMatchObject({ ok: true });
    createOperatorAuth({ pool: db.authPool, secret: SECRET, baseURL: 'http://localhost:3000', signInHashesPerSecond: 1_000 });
  });

  it('does the same work for an unknown email as for a known one (no user enumeration by timing): one argon2id operation, same parameters', async () => {
    // Counted, not timed: the time a sign-in takes is the argon2id operation it runs (timing
    // ratios belong in benchmarks, not in tests that a loaded machine can fail).
    const operations = async (email: string) => {
      const before = argon2OperationCount();
      const result = await signInOperator(auth, dashboard, { email, password: 'not the password' }, { headers: new Headers(), address: '198.51.100.1' }, roomy);
      expect(result).toEqual({ ok: false, reason: 'invalid' });
      return argon2OperationCount() - before;
    };
    for (let i = 0; i < 3; i += 1) {
      expect(await operations('ops@hashing.example')).toBe(1);
      expect(await operations(`nobody-${i}@hashing.example`)).toBe(1);
    }
    // The known email's verification runs at the stored hash's parameters: the ones an unknown email's hash uses.
    const stored = await db.pool.query<{ password: string }>(
      "SELECT a.password FROM operator_accounts a JOIN operators o ON o.id = a.user_id WHERE o.email = 'ops@hashing.example'",
    );
    expect(stored.rows[0]?.password).toContain(`$argon2id$v=19$${ARGON2ID_PARAMETERS}$`);
  });
});
