// 64 identical requests at once against running servers (the built app, started as
// `npm start` starts it): one payment, and every other answer is a byte-identical
// replay or a 409 with Retry-After. Then the same split across two server processes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTenant, type CreatedTenant } from '../../server/demo/tenants';
import { layouts, useTestDatabase } from '../helpers/database';
import { startServer, type RunningServer } from '../helpers/server';

const REQUESTS = 64;

describe.each(layouts)('concurrent identical requests over HTTP (%s layout)', (layout) => {
  const db = useTestDatabase(layout);
  const servers: RunningServer[] = [];
  let tenant: CreatedTenant;

  beforeAll(async () => {
    servers.push(await startServer(db.url, { DEMO_TRAFFIC: '0' }));
    servers.push(await startServer(db.url, { DEMO_TRAFFIC: '0' }));
    tenant = await createTenant(db.pool, 'concurrency');
  });
  afterAll(async () => {
    await Promise.all(servers.map((server) => server.stop()));
  });

  async function burst(key: string, targets: RunningServer[]) {
    const body = JSON.stringify({ amount: 4200, currency: 'EUR', description: key });
    const responses = await Promise.all(
      Array.from({ length: REQUESTS }, (_, index) =>
        fetch(`${targets[index % targets.length]?.baseUrl ?? ''}/api/v1/payments`, {
          method: 'POST',
          headers: { Authorization: `Bearer ${tenant.apiKey}`, 'Idempotency-Key': key, 'Content-Type': 'application/json' },
          body,
        }).then(async (response) => ({
          status: response.status,
          replayed: response.headers.get('idempotent-replayed'),
          retryAfter: response.headers.get('retry-after'),
          correlationId: response.headers.get('x-correlation-id'),
          body: Buffer.from(await response.arrayBuffer()),
        })),
      ),
    );
    const { rows } = await db.pool.query<{ n: string }>("SELECT count(*) AS n FROM payments WHERE principal_id = $1 AND description = $2", [
      tenant.principalId,
      key,
    ]);
    return { responses, payments: Number(rows[0]?.n) };
  }

  function expectOneEffect({ responses, payments }: Awaited<ReturnType<typeof burst>>) {
    expect(payments).toBe(1);
    const originals = responses.filter((response) => response.status === 201 && response.replayed === null);
    expect(originals).toHaveLength(1);
    const original = originals[0];
    if (!original) throw new Error('no original');
    for (const response of responses) {
      if (response === original) continue;
      if (response.status === 409) {
        expect(Number(response.retryAfter)).toBeGreaterThanOrEqual(1);
        continue;
      }
      expect(response.status).toBe(201);
      expect(response.replayed).toBe('true');
      expect(response.correlationId).toBe(original.correlationId);
      expect(response.body.equals(original.body)).toBe(true);
    }
  }

  it(`creates exactly one payment from ${REQUESTS} simultaneous identical requests to one server`, async () => {
    const [server] = servers;
    if (!server) throw new Error('no server');
    expectOneEffect(await burst('burst-one-server', [server]));
  });

  it(`creates exactly one payment when the ${REQUESTS} requests are split across two server processes`, async () => {
    expectOneEffect(await burst('burst-two-servers', servers));
  });
});
