// A payment's stored response carries a sentinel (its description). Whatever role an
// operator has, the sentinel appears in no admin API answer, page, export or log line;
// the only way out of the store is a replay to the paying tenant itself.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { routeAccess } from '../../app/_lib/access';
import { createTenant } from '../../server/demo/tenants';
import { operatorRoles, type OperatorRole } from '../../server/auth/roles';
import { useTestDatabase } from '../helpers/database';
import { signInEveryRole } from '../helpers/operators';
import { startServer, type RunningServer } from '../helpers/server';

const SENTINEL = 'SENTINEL-7c41-do-not-leak';

describe('a stored response never leaves the store but as a replay', () => {
  const db = useTestDatabase();
  let server: RunningServer | undefined;
  let cookies = new Map<OperatorRole, string>();
  let principalId = '';

  beforeAll(async () => {
    server = await startServer(db.url, { DEMO_TRAFFIC: '0' });
    const tenant = await createTenant(db.pool, 'Sentinel Ltd');
    principalId = tenant.principalId;
    const pay = () =>
      fetch(`${server?.baseUrl ?? ''}/api/v1/payments`, {
        method: 'POST',
        headers: { authorization: `Bearer ${tenant.apiKey}`, 'idempotency-key': 'sentinel-order', 'content-type': 'application/json' },
        body: JSON.stringify({ amount: 4200, currency: 'EUR', description: SENTINEL }),
      });
    const first = await pay();
    expect(first.status).toBe(201);
    const replay = await pay();
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await replay.text()).toContain(SENTINEL); // the tenant itself gets it back
    cookies = await signInEveryRole(db, server.baseUrl, 'sentinel.example');
  });
  afterAll(async () => {
    await server?.stop();
  });

  it.each(operatorRoles)('as %s: no page, API answer or export carries it', async (role) => {
    if (!server) throw new Error('no server');
    const base = server.baseUrl;
    const cookie = cookies.get(role) ?? '';
    const gets = [
      ...Object.keys(routeAccess).filter((path) => !path.includes('[') && !path.startsWith('/api/v1/')),
      '/api/admin/overview?range=24h',
      '/api/admin/audit?format=csv',
      '/api/admin/stale-claims?limit=500',
    ];
    const bodies: string[] = [];
    for (const path of gets) {
      const response = await fetch(`${base}${path}`, { headers: { cookie }, redirect: 'manual' });
      bodies.push(`${path} ${response.status} ${await response.text()}`);
    }
    const lookup = await fetch(`${base}/api/admin/keys/lookup`, {
      method: 'POST',
      headers: { cookie, origin: base, 'content-type': 'application/json' },
      body: JSON.stringify({ principalId, key: 'sentinel-order', reason: `sentinel check as ${role}` }),
    });
    const answer = await lookup.text();
    bodies.push(answer);
    if (role !== 'viewer') expect(JSON.parse(answer)).toMatchObject({ records: [{ scope: 'POST /api/v1/payments', state: 'completed', statusCode: 201 }] });
    for (const body of bodies) expect(body).not.toContain(SENTINEL);
  });

  it('is in no log line the server wrote', () => {
    expect(server?.output()).not.toContain(SENTINEL);
  });
});
