// Issue #13, point 4: unauthenticated traffic cannot grow the append-only audit log without
// bound. Failed (and refused) sign-ins of one account from one address within one window are
// one row with a count; unknown emails share one row per address and window; successes and
// lockouts stay one row each. The log is still append-only: an aggregated row may only count up.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOperatorAuth, signInOperator, type OperatorAuth } from '../../server/auth/operator-auth';
import { createOperator } from '../../server/auth/operators';
import { listAudit } from '../../server/audit/query';
import { useTestDatabase } from '../helpers/database';

const PASSWORD = 'correct horse battery';
const roomy = { accountFailures: 100, addressFailures: 1_000, windowSeconds: 900, lockSeconds: 900 };

describe('sign-in audit rows', () => {
  const db = useTestDatabase();
  let dashboard: pg.Pool;
  let auth: OperatorAuth;
  const from = (address: string | null) => ({ headers: new Headers(), address });

  beforeAll(async () => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 4 });
    auth = createOperatorAuth({ pool: db.authPool, secret: 'audit-test-secret-'.padEnd(40, 'x'), baseURL: 'http://localhost:3000', signInHashesPerSecond: 1_000 });
    for (const email of ['ops@audit.example', 'locked@audit.example']) await createOperator(db.pool, { email, password: PASSWORD, role: 'operator' }, { system: 'test' });
  });
  afterAll(async () => {
    await dashboard.end();
  });

  const rows = async (action: string) =>
    (
      await db.pool.query<{ actor: string; address: string | null; occurrences: number }>(
        "SELECT actor, details->>'address' AS address, occurrences FROM audit_log WHERE action = $1 ORDER BY actor, address",
        [action],
      )
    ).rows;

  it('counts N failures of one account from one address in one window in one row', async () => {
    for (let i = 0; i < 7; i += 1) await signInOperator(auth, dashboard, { email: 'ops@audit.example', password: `wrong ${i}` }, from('192.0.2.1'), roomy);
    for (let i = 0; i < 3; i += 1) await signInOperator(auth, dashboard, { email: 'ops@audit.example', password: `wrong ${i}` }, from('192.0.2.2'), roomy);
    expect(await rows('auth.sign_in_failed')).toEqual([
      { actor: 'ops@audit.example', address: '192.0.2.1', occurrences: 7 },
      { actor: 'ops@audit.example', address: '192.0.2.2', occurrences: 3 },
    ]);
    // The audit page and API show the count and the last time.
    const page = await listAudit(dashboard, { action: 'auth.sign_in_failed', limit: 10 });
    expect(page.entries.map((entry) => entry.occurrences).sort()).toEqual([3, 7]);
    expect(page.entries.every((entry) => entry.lastAt !== null && entry.lastAt >= entry.at)).toBe(true);
  });

  it('counts guesses at emails no operator has in one row per address and window', async () => {
    for (let i = 0; i < 12; i += 1) await signInOperator(auth, dashboard, { email: `guess-${i}@audit.example`, password: 'whatever it is' }, from('198.51.100.4'), roomy);
    expect((await rows('auth.sign_in_failed')).filter((row) => row.address === '198.51.100.4')).toEqual([{ actor: '(unknown account)', address: '198.51.100.4', occurrences: 12 }]);
  });

  it('keeps a lockout and each success one row, and counts the refused attempts after the lock in one row', async () => {
    const limits = { accountFailures: 3, addressFailures: 1_000, windowSeconds: 900, lockSeconds: 900 };
    for (let i = 0; i < 8; i += 1) await signInOperator(auth, dashboard, { email: 'locked@audit.example', password: `wrong ${i}` }, from('203.0.113.3'), limits);
    expect(await rows('auth.sign_in_locked')).toEqual([{ actor: 'locked@audit.example', address: '203.0.113.3', occurrences: 1 }]);
    expect(await rows('auth.sign_in_refused')).toEqual([{ actor: 'locked@audit.example', address: '203.0.113.3', occurrences: 5 }]);
    for (let i = 0; i < 2; i += 1) expect(await signInOperator(auth, dashboard, { email: 'ops@audit.example', password: PASSWORD }, from('192.0.2.1'), roomy)).toMatchObject({ ok: true });
    expect(await rows('auth.sign_in')).toEqual([
      { actor: 'ops@audit.example', address: '192.0.2.1', occurrences: 1 },
      { actor: 'ops@audit.example', address: '192.0.2.1', occurrences: 1 },
    ]);
  });

  it('stays append-only: an aggregated row may only count up, nothing may be changed or deleted', async () => {
    const refused = [
      "UPDATE audit_log SET actor = 'someone else' WHERE aggregate_key IS NOT NULL",
      'UPDATE audit_log SET occurrences = occurrences - 1 WHERE aggregate_key IS NOT NULL',
      "UPDATE audit_log SET occurrences = occurrences + 1, last_at = now(), details = '{}' WHERE aggregate_key IS NOT NULL",
      'UPDATE audit_log SET occurrences = occurrences + 1, last_at = now() WHERE aggregate_key IS NULL',
      'DELETE FROM audit_log WHERE aggregate_key IS NOT NULL',
      'TRUNCATE audit_log',
    ];
    for (const statement of refused) await expect(db.pool.query(statement), statement).rejects.toThrow(/append-only/);
    // The dashboard's role has no UPDATE at all, and the function folds only sign-in failures and refusals.
    await expect(dashboard.query('UPDATE audit_log SET occurrences = occurrences + 1, last_at = now() WHERE aggregate_key IS NOT NULL')).rejects.toThrow(/permission denied/);
    await expect(dashboard.query(`SELECT retrysafe_audit_sign_in_attempt('operator.create', 'x', '{}', '{}', NULL, 900)`)).rejects.toThrow(/only failed or refused sign-ins/);
  });
});
