// Issue #26, point 1: a team's own Postgres (DATABASE_URL, not embedded mode) with every other
// setting at its default, PUBLIC_URL included. `npm start` must reach healthy (its self-check
// was answered 421 for Host 127.0.0.1:PORT and the start failed after 60 s), print where to open
// the dashboard, and an operator must be able to sign in there. The database is this file's own
// and empty: the start migrates it as it would a team's new database.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, dashboardUrlFor } from '../helpers/database';
import { httpRequest, submitLoginAsScript, submitLoginForm } from '../helpers/login-form';
import { testAdmin, testSecrets } from '../helpers/server';
import { spawnStart, type RunningServer } from '../../scripts/spawn-start';

/** `npm start` on a new, empty database of the file's own with the settings a team gives it, and `settings` besides. */
async function startOnOwnDatabase(settings: Record<string, string>): Promise<{ database: Awaited<ReturnType<typeof createTestDatabase>>; server: RunningServer }> {
  const database = await createTestDatabase({ empty: true, serverSearchPath: false });
  const server = await spawnStart({
    DATABASE_URL: database.url,
    DASHBOARD_DATABASE_URL: dashboardUrlFor(database.url),
    IDEMPOTENCY_SECRET: testSecrets.IDEMPOTENCY_SECRET,
    RESPONSE_ENCRYPTION_KEYS: testSecrets.RESPONSE_ENCRYPTION_KEYS,
    AUTH_SECRET: testSecrets.AUTH_SECRET,
    ADMIN_EMAIL: testAdmin.email,
    ADMIN_PASSWORD: testAdmin.password,
    // Empty counts as unset: the defaults a team starts with.
    DEMO_TRAFFIC: '',
    RETRYSAFE_EMBEDDED: '',
    ...settings,
  });
  return { database, server };
}

describe('npm start on a database of the team\'s own, PUBLIC_URL unset', () => {
  let database: Awaited<ReturnType<typeof createTestDatabase>> | undefined;
  let server: RunningServer | undefined;

  beforeAll(async () => {
    ({ database, server } = await startOnOwnDatabase({ PUBLIC_URL: '', LOG_LEVEL: 'error' }));
  });
  afterAll(async () => {
    await server?.stop();
    await database?.drop();
  });

  it('reaches healthy and says to open the default PUBLIC_URL, http://localhost:PORT', () => {
    const output = server?.output() ?? '';
    expect(output).toContain(`[retrysafe] Ready: open http://localhost:${server?.port} in your browser`);
    expect(output).not.toContain('Start failed');
  });

  it('runs built JavaScript, as production does: the bundled front, not TypeScript through tsx (#29 point 4)', () => {
    const output = server?.output() ?? '';
    expect(output).toMatch(/\[retrysafe\] Starting the server on 127\.0\.0\.1:\d+ \(node --enable-source-maps \.build\/[0-9a-f]{16}\/serve\.mjs\)/);
    expect(output).not.toContain('--import tsx');
  });

  it('answers its health check and signs the admin in at that address', async () => {
    const base = `http://localhost:${server?.port}`;
    const health = await fetch(`${base}/api/health`);
    expect(health.status).toBe(200);
    const signedIn = await submitLoginForm(base, testAdmin, {}, { waitWhenBusy: true });
    expect(signedIn.message).toBeNull();
    expect(signedIn.status).toBe(303);
    const cookie = signedIn.setCookie.map((line) => line.split(';')[0]).join('; ');
    expect(cookie).not.toBe('');
    const overview = await fetch(`${base}/api/admin/overview?range=1h`, { headers: { cookie } });
    expect(overview.status).toBe(200);
  });

  it("signs in as the page's script does: the answer carries the next page, which Next fetched from itself at HOST:PORT", async () => {
    // Next fetches a redirecting action's target from the address it was started on
    // (127.0.0.1:PORT) with the browser's Origin; that Host was answered 421 outside embedded
    // mode, so the answer came back empty and the browser had to ask again.
    const port = server?.port ?? 0;
    const answer = await submitLoginAsScript({ hostname: '127.0.0.1', port }, testAdmin, { host: `localhost:${port}`, origin: `http://localhost:${port}` });
    expect(answer.status).toBe(200);
    expect(answer.redirect).toBe('/;push');
    expect(answer.setCookie.some((line) => line.startsWith('retrysafe.session_token='))).toBe(true);
    expect(answer.contentType).toMatch(/^text\/x-component/);
    expect(answer.bodyBytes).toBeGreaterThan(0);
  });

  it('still refuses a host name it does not answer for (the DNS-rebinding guard stays)', async () => {
    const misdirected = await hostStatus(server?.port ?? 0, `rebound.example:${server?.port}`);
    expect(misdirected).toBe(421);
  });
});

describe('npm start behind a proxy, PUBLIC_URL https://retrysafe.example, TRUST_PROXY=loopback', () => {
  let database: Awaited<ReturnType<typeof createTestDatabase>> | undefined;
  let server: RunningServer | undefined;

  beforeAll(async () => {
    ({ database, server } = await startOnOwnDatabase({ PUBLIC_URL: 'https://retrysafe.example', TRUST_PROXY: 'loopback', LOG_LEVEL: 'warn' }));
  });
  afterAll(async () => {
    await server?.stop();
    await database?.drop();
  });

  it("signs in as the page's script does, with the next page in the answer and no refusal logged", async () => {
    // The request as the proxy passes it on: Host and Origin are the public ones. Next's fetch of
    // the redirect target from itself carries that Origin to Host 127.0.0.1:PORT, which the action
    // screen took for a foreign origin (a warning at every sign-in, and another round trip).
    const port = server?.port ?? 0;
    const answer = await submitLoginAsScript({ hostname: '127.0.0.1', port }, testAdmin, { host: 'retrysafe.example', origin: 'https://retrysafe.example' });
    expect(answer.status).toBe(200);
    expect(answer.redirect).toBe('/;push');
    expect(answer.contentType).toMatch(/^text\/x-component/);
    expect(answer.bodyBytes).toBeGreaterThan(0);
    expect(server?.output() ?? '').not.toContain('refused a server action request');
  });

  it('signs in as the page\'s script does through a proxy that ends TLS (X-Forwarded-Proto https), with the next page in the answer', async () => {
    // Next builds the origin it fetches itself at from the request, X-Forwarded-Proto's scheme
    // included (kept: the proxy is trusted), so it fetched https:// from this plain-HTTP server
    // and the answer came back empty, unless told its own origin as next start tells it.
    const port = server?.port ?? 0;
    const answer = await submitLoginAsScript({ hostname: '127.0.0.1', port }, testAdmin, {
      host: 'retrysafe.example',
      origin: 'https://retrysafe.example',
      'x-forwarded-proto': 'https',
      'x-forwarded-host': 'retrysafe.example',
      'x-forwarded-for': '203.0.113.9',
    });
    expect(answer.status).toBe(200);
    expect(answer.redirect).toBe('/;push');
    expect(answer.contentType).toMatch(/^text\/x-component/);
    expect(answer.bodyBytes).toBeGreaterThan(0);
    expect(server?.output() ?? '').not.toMatch(/refused a server action request|failed to get redirect response/);
  });

  it('still refuses an RSC request from another origin, and a host name it does not answer for, whatever the Origin', async () => {
    const port = server?.port ?? 0;
    expect(await hostStatus(port, 'retrysafe.example', { origin: 'https://evil.example', rsc: '1' })).toBe(403);
    expect(await hostStatus(port, `rebound.example:${port}`)).toBe(421);
    expect(await hostStatus(port, `rebound.example:${port}`, { origin: 'https://retrysafe.example', rsc: '1' })).toBe(421);
  });
});

/** The status of GET / at 127.0.0.1:port sent with this Host (fetch cannot set one). */
async function hostStatus(port: number, host: string, headers: Record<string, string> = {}): Promise<number> {
  return (await httpRequest({ hostname: '127.0.0.1', port }, { method: 'GET', path: '/', headers: { host, ...headers } })).status;
}
