// Every page and route is in the access table (app/_lib/access.ts), and the table holds over
// HTTP against the started server: no session -> 401 (routes) or /login (pages); each role
// below the required one -> 403; the required role gets through. Mutations from another
// origin are refused; admin answers are never cached.
import { readdir, readFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { join, relative, sep } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { routeAccess, type Access } from '../../app/_lib/access';
import { operatorRoles, roleIncludes, type OperatorRole } from '../../server/auth/roles';
import { useTestDatabase } from '../helpers/database';
import { signInEveryRole } from '../helpers/operators';
import { startServer, type RunningServer } from '../helpers/server';

/** Every page.tsx and route.ts under app/, as its URL path (route groups dropped). */
async function appRoutes(): Promise<{ path: string; file: string }[]> {
  const root = join(process.cwd(), 'app');
  const entries = await readdir(root, { recursive: true });
  return entries
    .filter((entry) => /(^|\/)(page\.tsx|route\.ts)$/.test(entry.split(sep).join('/')))
    .map((entry) => {
      const segments = entry.split(sep).slice(0, -1).filter((segment) => !/^\(.*\)$/.test(segment) && !segment.startsWith('_'));
      return { path: `/${segments.join('/')}`, file: relative(process.cwd(), join(root, entry)) };
    });
}

const routeMethods = /export (?:async function|const) (GET|POST|PUT|PATCH|DELETE)\b(?! *,)/g;
const concrete = (path: string) => path.replace(/\[[^\]]+\]/g, 'no-such-id');

describe('access control', () => {
  const db = useTestDatabase();
  let server: RunningServer | undefined;
  const cookies = new Map<OperatorRole, string>();

  beforeAll(async () => {
    server = await startServer(db.url, { DEMO_TRAFFIC: '0' });
    for (const [role, cookie] of await signInEveryRole(db, server.baseUrl, 'access.example')) cookies.set(role, cookie);
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('lists every page and route file, and nothing that does not exist', async () => {
    const paths = (await appRoutes()).map((route) => route.path).sort();
    expect(paths).toEqual(Object.keys(routeAccess).sort());
  });

  const operatorRoutes = Object.entries(routeAccess as Record<string, Access>).filter(
    (entry): entry is [string, Extract<Access, { kind: 'operator' }>] => entry[1].kind === 'operator',
  );

  // What a role allowed gets, per method and route, for the request this test sends (GET, or a
  // same-origin `{}` body, ids that exist nowhere): the page or data, or 400 for the empty input.
  const allowedStatus: Record<string, number> = {
    'GET /': 200,
    'GET /keys': 200,
    'GET /claims': 200,
    'GET /retention': 200,
    'GET /audit': 200,
    'GET /operators': 200,
    'GET /access-review': 200,
    'GET /account': 200,
    'GET /api/admin/overview': 200,
    'GET /api/admin/operators': 200,
    'GET /api/admin/access-review': 200,
    'POST /api/admin/operators': 400,
    'PATCH /api/admin/operators/[id]': 400,
    'POST /api/admin/operators/[id]/password': 400,
    'POST /api/account/password': 400,
    'GET /api/admin/audit': 200,
    'POST /api/admin/keys/lookup': 400,
    'POST /api/admin/keys/list': 400,
    'POST /api/admin/keys/correlation': 400,
    'POST /api/admin/keys/unrecorded': 400,
    'POST /api/admin/keys/reconcile': 400,
    'GET /api/admin/principals': 400,
    'GET /api/admin/retention': 200,
    'GET /api/admin/retention/export': 400,
    'POST /api/admin/policies': 400,
    'GET /api/admin/stale-claims': 200,
    'POST /api/admin/stale-claims/release': 400,
  };

  it('knows the allowed answer of every operator route and method', async () => {
    const expected: string[] = [];
    for (const [path] of operatorRoutes) {
      const file = (await appRoutes()).find((route) => route.path === path)?.file ?? '';
      if (file.endsWith('page.tsx')) expected.push(`GET ${path}`);
      else for (const match of (await readFile(file, 'utf8')).matchAll(routeMethods)) expected.push(`${match[1] ?? 'GET'} ${path}`);
    }
    expect(expected.sort()).toEqual(Object.keys(allowedStatus).sort());
  });

  it.each(operatorRoutes)('%s: no session, each role below %o, and the role itself', async (path, access) => {
    if (!server) throw new Error('no server');
    const routes = await appRoutes();
    const file = routes.find((route) => route.path === path)?.file ?? '';
    const isPage = file.endsWith('page.tsx');
    const methods = isPage ? ['GET'] : [...(await readFile(file, 'utf8')).matchAll(routeMethods)].map((match) => match[1] ?? 'GET');
    expect(methods.length).toBeGreaterThan(0);
    for (const method of methods) {
      const send = (cookie?: string) =>
        fetch(`${server?.baseUrl ?? ''}${concrete(path)}`, {
          method,
          redirect: 'manual',
          headers: { ...(cookie ? { cookie } : {}), ...(method === 'GET' ? {} : { origin: server?.baseUrl ?? '', 'content-type': 'application/json' }) },
          ...(method === 'GET' ? {} : { body: '{}' }),
        });
      const anonymous = await send();
      if (isPage) {
        expect(anonymous.status).toBe(307);
        expect(anonymous.headers.get('location')).toContain(`/login?next=${encodeURIComponent(path)}`);
      } else {
        expect(anonymous.status).toBe(401);
        expect(anonymous.headers.get('content-type')).toBe('application/problem+json');
      }
      for (const role of operatorRoles) {
        const response = await send(cookies.get(role));
        if (roleIncludes(role, access.role)) {
          // The exact answer, not merely "not 401/403" (a 500 is not access granted).
          expect([method, role, response.status]).toEqual([method, role, allowedStatus[`${method} ${path}`]]);
          if (!isPage) expect(response.headers.get('cache-control')).toBe('no-store');
        } else {
          expect([method, role, response.status]).toEqual([method, role, 403]);
        }
      }
    }
  });

  it('with METRICS_TOKEN unset, /api/metrics and the health details are open alike', async () => {
    const base = server?.baseUrl ?? '';
    const metrics = await fetch(`${base}/api/metrics`);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toContain('retrysafe_');
    const health = (await (await fetch(`${base}/api/health`)).json()) as { status: string; database?: { serverVersion?: string } };
    expect(health.status).toBe('ok');
    expect(health.database?.serverVersion).toMatch(/^\d+/);
  });

  it('refuses a mutation from another origin even with an admin session', async () => {
    if (!server) throw new Error('no server');
    for (const origin of [undefined, 'https://evil.example']) {
      const response = await fetch(`${server.baseUrl}/api/admin/operators`, {
        method: 'POST',
        headers: { cookie: cookies.get('admin') ?? '', 'content-type': 'application/json', ...(origin ? { origin } : {}) },
        body: JSON.stringify({ email: 'evil@example.com', password: 'a long test password', role: 'admin' }),
      });
      expect(response.status).toBe(403);
    }
    const { rows } = await db.pool.query("SELECT 1 FROM operators WHERE email = 'evil@example.com'");
    expect(rows).toEqual([]);
  });
});

const METRICS_TOKEN = 'metrics-token-for-the-hostile-tests';

describe('hostile headers and input', () => {
  const db = useTestDatabase();
  let server: RunningServer | undefined;
  let operator = '';

  beforeAll(async () => {
    server = await startServer(db.url, { DEMO_TRAFFIC: '0', METRICS_TOKEN: METRICS_TOKEN });
    operator = (await signInEveryRole(db, server.baseUrl, 'hostile.example')).get('compliance') ?? '';
  });
  afterAll(async () => {
    await server?.stop();
  });

  it.each<Record<string, string>>([{ purpose: 'prefetch' }, { 'next-router-prefetch': '1' }, { 'sec-purpose': 'prefetch' }, {}])('every HTML answer carries the CSP (request headers %o)', async (headers) => {
    for (const path of ['/login', '/audit']) {
      const response = await fetch(`${server?.baseUrl ?? ''}${path}`, { headers: { ...headers, cookie: operator }, redirect: 'manual' });
      expect(response.headers.get('content-type')).toContain('text/html');
      expect(response.headers.get('content-security-policy')).toMatch(/script-src 'self' 'nonce-[^']+' 'strict-dynamic'/);
    }
  });

  it('answers a NUL character or an unrepresentable date in admin input with a 400 naming the field', async () => {
    const base = server?.baseUrl ?? '';
    const lookup = await fetch(`${base}/api/admin/keys/lookup`, {
      method: 'POST',
      headers: { cookie: operator, origin: base, 'content-type': 'application/json' },
      body: JSON.stringify({ principalId: '6f1c1b5e-3f5e-4d7a-9a43-0f6c2f1f0a11', key: 'k', reason: 'ticket \u0000 42' }),
    });
    expect(lookup.status).toBe(400);
    expect(((await lookup.json()) as { errors: { path: string }[] }).errors.map((error) => error.path)).toEqual(['reason']);
    const audit = await fetch(`${base}/api/admin/audit?from=0000-01-01T00:00:00Z`, { headers: { cookie: operator } });
    expect(audit.status).toBe(400);
    expect(((await audit.json()) as { errors: { path: string }[] }).errors.map((error) => error.path)).toEqual(['from']);
    const actor = await fetch(`${base}/api/admin/audit?actor=${encodeURIComponent('a\u0000')}`, { headers: { cookie: operator } });
    expect(actor.status).toBe(400);
  });

  it('refuses a foreign Origin that names itself in X-Forwarded-Host', async () => {
    const base = server?.baseUrl ?? '';
    const response = await fetch(`${base}/api/admin/keys/lookup`, {
      method: 'POST',
      headers: { cookie: operator, origin: 'https://evil.example', 'x-forwarded-host': 'evil.example', 'content-type': 'application/json' },
      body: JSON.stringify({ principalId: '6f1c1b5e-3f5e-4d7a-9a43-0f6c2f1f0a11', key: 'k', reason: 'ticket 42' }),
    });
    expect(response.status).toBe(403);
  });

  it('answers 415 to an admin body that is not declared application/json', async () => {
    const base = server?.baseUrl ?? '';
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', undefined]) {
      const response = await fetch(`${base}/api/admin/keys/lookup`, {
        method: 'POST',
        headers: { cookie: operator, origin: base, ...(type ? { 'content-type': type } : {}) },
        body: JSON.stringify({ principalId: '6f1c1b5e-3f5e-4d7a-9a43-0f6c2f1f0a11', key: 'k', reason: 'ticket 42' }),
      });
      expect([type, response.status]).toEqual([type, 415]);
      expect(response.headers.get('content-type')).toBe('application/problem+json');
      expect(response.headers.get('cache-control')).toBe('no-store');
    }
  });

  it('refuses an audited export another site asked the browser for, and writes no audit row', async () => {
    const base = server?.baseUrl ?? '';
    const count = async () => Number((await db.pool.query<{ n: string }>("SELECT count(*) AS n FROM audit_log WHERE action IN ('audit.export', 'retention.export')")).rows[0]?.n);
    const before = await count();
    for (const path of ['/api/admin/audit?format=csv', '/api/admin/retention/export?what=evidence']) {
      for (const site of ['cross-site', 'same-site']) {
        const refused = await fetch(`${base}${path}`, { headers: { cookie: operator, 'sec-fetch-site': site } });
        expect([path, site, refused.status]).toEqual([path, site, 403]);
      }
      // The dashboard's own download (same-origin), and a person typing the address (none), still work.
      for (const site of ['same-origin', 'none']) expect((await fetch(`${base}${path}`, { headers: { cookie: operator, 'sec-fetch-site': site } })).status).toBe(200);
    }
    expect(await count()).toBe(before + 4);
  });

  it('answers 421 for another host name (DNS rebinding) on pages, admin routes, health and metrics', async () => {
    const base = server?.baseUrl ?? '';
    // fetch() may not set Host (a forbidden header): a plain HTTP request, as a rebinding browser sends it.
    const statusWithHost = (path: string, host: string) =>
      new Promise<number>((done, fail) => {
        const url = new URL(path, base);
        const sent = httpRequest({ hostname: url.hostname, port: url.port, path: url.pathname, headers: { host, cookie: operator, authorization: `Bearer ${METRICS_TOKEN}` } }, (answer) => {
          answer.resume();
          done(answer.statusCode ?? 0);
        });
        sent.on('error', fail);
        sent.end();
      });
    for (const path of ['/login', '/', '/api/admin/overview', '/api/health', '/api/metrics']) {
      expect([path, await statusWithHost(path, 'rebind.example')]).toEqual([path, 421]);
      expect([path, await statusWithHost(path, `rebind.example:${new URL(base).port}`)]).toEqual([path, 421]);
    }
    // Its own host still answers.
    expect((await fetch(`${base}/api/health`)).status).toBe(200);
  });

  it('with METRICS_TOKEN set, tells the public only the health status and refuses it /api/metrics; operators or token holders get the details', async () => {
    const base = server?.baseUrl ?? '';
    expect((await fetch(`${base}/api/metrics`)).status).toBe(401);
    expect((await fetch(`${base}/api/metrics`, { headers: { authorization: 'Bearer not-the-token-at-all' } })).status).toBe(401);
    expect((await fetch(`${base}/api/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).status).toBe(200);
    expect(await (await fetch(`${base}/api/health`)).json()).toEqual({ status: 'ok' });
    expect(await (await fetch(`${base}/api/health`, { headers: { authorization: 'Bearer not-the-token-at-all' } })).json()).toEqual({ status: 'ok' });
    for (const headers of [{ cookie: operator }, { authorization: `Bearer ${METRICS_TOKEN}` }] as Record<string, string>[]) {
      const detail = (await (await fetch(`${base}/api/health`, { headers })).json()) as { database?: { serverVersion?: string }; migrations?: { pending: string[] } };
      expect(detail.database?.serverVersion).toMatch(/^\d+/);
      expect(detail.migrations?.pending).toEqual([]);
    }
  });

  it('marks every admin answer no-store, the framework\'s 405 included', async () => {
    const response = await fetch(`${server?.baseUrl ?? ''}/api/admin/overview`, { method: 'DELETE', headers: { cookie: operator, origin: server?.baseUrl ?? '' } });
    expect(response.status).toBe(405);
    expect(response.headers.get('cache-control')).toBe('no-store');
  });
});

