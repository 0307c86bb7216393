// Issue #13, points 1 and 7: the client address and the forwarded host come from the socket
// and TRUST_PROXY, never from what a client writes. Through the real /login form of a started
// server: a forged X-Forwarded-For per attempt no longer dodges the per-address limit, a
// trusted proxy's record is honoured, and a foreign Origin cannot name itself in X-Forwarded-Host.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOperator } from '../../server/auth/operators';
import { useTestDatabase } from '../helpers/database';
import { submitLoginForm } from '../helpers/login-form';
import { startServer, type RunningServer } from '../helpers/server';

const PASSWORD = 'a long test password';

/** As the owner, like the CLI: creating an operator without an admin session is the owner's. */
async function createOperators(ownerUrl: string, emails: string[]): Promise<void> {
  const owner = new pg.Pool({ connectionString: ownerUrl, max: 2 });
  try {
    for (const email of emails) await createOperator(owner, { email, password: PASSWORD, role: 'viewer' }, { system: 'test' });
  } finally {
    await owner.end();
  }
}

const failureAddresses = async (pool: pg.Pool) =>
  (await pool.query<{ address: string | null }>("SELECT DISTINCT details->>'address' AS address FROM audit_log WHERE action = 'auth.sign_in_failed'")).rows.map((row) => row.address);

describe('TRUST_PROXY unset: the socket address is the client', () => {
  const db = useTestDatabase();
  let server: RunningServer | undefined;
  const emails = Array.from({ length: 25 }, (_, i) => `spray-${i}@addresses.example`);

  beforeAll(async () => {
    server = await startServer(db.url, { DEMO_TRAFFIC: '0' });
    await createOperators(db.url, [...emails, 'victim@addresses.example']);
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('counts 25 wrong passwords on 25 accounts, each with a new forged X-Forwarded-For, against the one real address', async () => {
    const base = server?.baseUrl ?? '';
    const messages: (string | null)[] = [];
    for (const [i, email] of emails.entries()) {
      const answer = await submitLoginForm(base, { email, password: 'not the password' }, { 'x-forwarded-for': `203.0.113.${i + 1}`, 'x-real-ip': `198.51.100.${i + 1}` }, { waitWhenBusy: true });
      messages.push(answer.message);
    }
    // Twenty wrong passwords from 127.0.0.1, then that address is locked (for unknown devices).
    expect(messages.slice(0, 20).every((message) => message?.startsWith('Wrong email or password'))).toBe(true);
    expect(messages.slice(20).every((message) => message?.startsWith('Too many failed sign-ins'))).toBe(true);
    expect(await failureAddresses(db.pool)).toEqual(['127.0.0.1']);
  });

  it('refuses a server action whose foreign Origin names itself in X-Forwarded-Host', async () => {
    const base = server?.baseUrl ?? '';
    await db.pool.query('DELETE FROM sign_in_throttle');
    const answer = await submitLoginForm(base, { email: 'victim@addresses.example', password: PASSWORD }, { origin: 'https://evil.example', 'x-forwarded-host': 'evil.example', 'x-forwarded-proto': 'https' });
    expect(answer.setCookie.some((line) => line.startsWith('retrysafe.session_token='))).toBe(false);
    expect(answer.status).not.toBe(303);
    const { rows } = await db.pool.query("SELECT 1 FROM audit_log WHERE action = 'auth.sign_in' AND actor = 'victim@addresses.example'");
    expect(rows).toEqual([]);
    // From the dashboard's own origin the same sign-in works.
    const own = await submitLoginForm(base, { email: 'victim@addresses.example', password: PASSWORD }, {}, { waitWhenBusy: true });
    expect(own.status).toBe(303);
    expect(own.setCookie.some((line) => line.startsWith('retrysafe.session_token='))).toBe(true);
  });
});

describe('TRUST_PROXY=loopback: a proxy on loopback records the client', () => {
  const db = useTestDatabase();
  let server: RunningServer | undefined;

  beforeAll(async () => {
    server = await startServer(db.url, { DEMO_TRAFFIC: '0', TRUST_PROXY: 'loopback' });
    await createOperators(db.url, ['behind@proxy.example']);
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('takes the nearest address the trusted proxy recorded, not the one the client wrote before it', async () => {
    const answer = await submitLoginForm(server?.baseUrl ?? '', { email: 'behind@proxy.example', password: 'not the password' }, { 'x-forwarded-for': '198.51.100.66, 203.0.113.9' }, { waitWhenBusy: true });
    expect(answer.message).toMatch(/^Wrong email or password/);
    expect(await failureAddresses(db.pool)).toEqual(['203.0.113.9']);
  });
});
