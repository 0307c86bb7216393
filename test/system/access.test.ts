// Every page and route is in the access table (app/_lib/access.ts), and the table holds over
// HTTP against the started server: no session -> 401 (routes) or /login (pages); each role
// below the required one -> 403; the required role gets through. Mutations from another
// origin are refused; admin answers are never cached.
import { readdir, readFile } from 'node:fs/promises';
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

const concrete = (path: string) => path.replace(/\[[^\]]+\]/g, 'no-such-id');

describe('access control', () => {
  const db = useTestDatabase();
  let server: RunningServer | undefined;
  const cookies = new Map<OperatorRole, string>();

  beforeAll(async () => {
    server = await startServer(db.url, { DEMO_TRAFFIC: '0' });
    for (const [role, cookie] of await signInEveryRole(db.dashboardUrl, server.baseUrl, 'access.example')) cookies.set(role, cookie);
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

  it.each(operatorRoutes)('%s: no session, each role below %o, and the role itself', async (path, access) => {
    if (!server) throw new Error('no server');
    const routes = await appRoutes();
    const file = routes.find((route) => route.path === path)?.file ?? '';
    const isPage = file.endsWith('page.tsx');
    const methods = isPage ? ['GET'] : [...(await readFile(file, 'utf8')).matchAll(/export async function (GET|POST|PUT|PATCH|DELETE)\b/g)].map((match) => match[1] ?? 'GET');
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
          expect([method, role, response.status]).not.toEqual([method, role, 401]);
          expect([method, role, response.status]).not.toEqual([method, role, 403]);
          if (!isPage) expect(response.headers.get('cache-control')).toBe('no-store');
        } else {
          expect([method, role, response.status]).toEqual([method, role, 403]);
        }
      }
    }
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
