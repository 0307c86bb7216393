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
  /** The X-Correlation-Id of a 422 (the same key, another body carrying the sentinel too). */
  let mismatchId = '';

  beforeAll(async () => {
    server = await startServer(db.url, { DEMO_TRAFFIC: '0', METRICS_FLUSH_SECONDS: '1' });
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
    // A mismatch, traced with its correlation id (issue 31.1): its answer and its key's trace carry no body either.
    const other = await fetch(`${server.baseUrl}/api/v1/payments`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.apiKey}`, 'idempotency-key': 'sentinel-order', 'content-type': 'application/json' },
      body: JSON.stringify({ amount: 4300, currency: 'EUR', description: `${SENTINEL}-other` }),
    });
    expect(other.status).toBe(422);
    mismatchId = other.headers.get('x-correlation-id') ?? '';
    for (let waited = 0; waited < 100; waited += 1) {
      const { rowCount } = await db.pool.query('SELECT 1 FROM retrysafe.key_attempts WHERE correlation_id = $1', [mismatchId]);
      if (rowCount) break;
      await new Promise((done) => setTimeout(done, 100));
    }
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
    if (role !== 'viewer') {
      expect(JSON.parse(answer)).toMatchObject({ records: [{ scope: 'POST /api/v1/payments', state: 'completed', statusCode: 201, counts: { replays: 1, mismatches: 1 } }] });
    }
    const correlation = await fetch(`${base}/api/admin/keys/correlation`, {
      method: 'POST',
      headers: { cookie, origin: base, 'content-type': 'application/json' },
      body: JSON.stringify({ correlationId: mismatchId, reason: `sentinel check as ${role}` }),
    });
    const found = await correlation.text();
    bodies.push(found);
    if (role !== 'viewer') expect(JSON.parse(found)).toMatchObject({ attempts: [{ key: 'sentinel-order', outcome: 'mismatch', status: 422, record: { counts: { mismatches: 1 } } }] });
    // Nor the fingerprint beyond the prefix the record shows.
    const fingerprint = (await db.pool.query<{ hex: string }>("SELECT encode(fingerprint, 'hex') AS hex FROM retrysafe.idempotency_keys WHERE key = 'sentinel-order'")).rows[0]?.hex ?? '';
    for (const body of bodies) {
      expect(body).not.toContain(SENTINEL);
      expect(body).not.toContain(fingerprint.slice(8));
    }
  });

  it('is in no log line the server wrote', () => {
    expect(server?.output()).not.toContain(SENTINEL);
  });
});
