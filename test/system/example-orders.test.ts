// The example service as an outside team runs it (#14 point 6): the @retrysafe/store tarball
// and express installed into an empty project (nothing else from this repository), the example's
// server.mjs copied there and started with `node server.mjs` against the database the Retrysafe
// server (`npm start`'s script) uses. Orders with retries, concurrent duplicates and bad input
// answer the demo API's status table, and the dashboard shows them: the overview under the
// service `orders`, and the key lookup for that principal and key.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers/database';
import { installExample, type ExampleProject, type RunningExample } from '../helpers/example-service';
import { signInEveryRole } from '../helpers/operators';
import { startServer, type RunningServer } from '../helpers/server';

describe('examples/orders-express from the tarball, on the dashboard', () => {
  const db = useTestDatabase();
  let dashboard: RunningServer | undefined;
  let project: ExampleProject | undefined;
  let example: RunningExample | undefined;
  let ordersUrl = '';

  beforeAll(async () => {
    dashboard = await startServer(db.url, { DEMO_TRAFFIC: '0' });
    project = await installExample();
    // docs/adopting.md's step before the first start: the store's migrations, from the installed package
    // (the Retrysafe server migrated this database already: nothing to do, and no error).
    const migrated = await project.retrysafe(['migrate'], { DATABASE_URL: db.url });
    expect((migrated as { applied: string[] }).applied).toEqual([]);
    example = await project.start({ DATABASE_URL: db.url });
    ordersUrl = example.ordersUrl;
  }, 600_000);

  afterAll(async () => {
    await project?.remove();
    await dashboard?.stop();
  });

  const principal = randomUUID();
  const order = (key: string, body: unknown, principalId = principal) =>
    fetch(ordersUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${principalId}`, 'idempotency-key': key },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });

  it('answers orders, retries, duplicates and bad input as the contract says, and shows them on the dashboard', async () => {
    const first = await order('order-1', { sku: 'BOOK-1', quantity: 2 });
    expect(first.status).toBe(201);
    const firstBody = await first.text();
    expect(JSON.parse(firstBody)).toMatchObject({ sku: 'BOOK-1', quantity: 2, id: expect.any(String) as string });
    const correlationId = first.headers.get('x-correlation-id');

    // A retry (same body, key order and spacing changed) is the original, byte for byte.
    const retry = await order('order-1', '{ "quantity": 2,  "sku": "BOOK-1" }');
    expect(retry.status).toBe(201);
    expect(await retry.text()).toBe(firstBody);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.headers.get('x-correlation-id')).toBe(correlationId);

    // Concurrent duplicates of a new key: exactly one runs; the others replay it or wait (409).
    const burst = await Promise.all(Array.from({ length: 8 }, () => order('order-2', { sku: 'PEN-9', quantity: 1 })));
    const bodies = await Promise.all(burst.map((response) => response.text()));
    const created = burst.filter((response) => response.status === 201 && response.headers.get('idempotent-replayed') !== 'true');
    expect(created).toHaveLength(1);
    for (const [index, response] of burst.entries()) {
      expect([201, 409]).toContain(response.status);
      if (response.status === 409) expect(Number(response.headers.get('retry-after'))).toBeGreaterThan(0);
      if (response.status === 201) expect(bodies[index]).toBe(bodies[burst.indexOf(created[0] as Response)]);
    }

    expect((await order('order-1', { sku: 'BOOK-1', quantity: 3 })).status).toBe(422);
    expect((await order('bad key', { sku: 'BOOK-1', quantity: 1 })).status).toBe(400);
    const invalid = await order('order-3', { sku: '', quantity: 0 });
    expect(invalid.status).toBe(400);
    expect(invalid.headers.get('content-type')).toContain('application/problem+json');
    expect((await order('order-4', { sku: 'X'.repeat(20_000), quantity: 1 })).status).toBe(413);
    expect((await fetch(ordersUrl, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': 'k' }, body: '{}' })).status).toBe(401);

    // A graceful stop flushes the service's flow counts to the shared buckets.
    await example?.stop();

    if (!dashboard) throw new Error('no dashboard');
    const cookies = await signInEveryRole(db, dashboard.baseUrl, 'orders.example');
    const cookie = cookies.get('operator') ?? '';
    const overview = await fetch(`${dashboard.baseUrl}/api/admin/overview?range=1h&service=orders`, { headers: { cookie } });
    expect(overview.status).toBe(200);
    const data = (await overview.json()) as { service: string; services: string[]; scopes: string[]; flow: { counts: Record<string, number> }[] };
    expect(data.service).toBe('orders');
    expect(data.services).toContain('orders');
    expect(data.scopes).toEqual(['POST /orders']);
    const total = (outcome: string) => data.flow.reduce((sum, point) => sum + (point.counts[outcome] ?? 0), 0);
    expect(total('new')).toBe(2);
    expect(total('mismatch')).toBe(1);
    expect(total('replay') + total('conflict')).toBe(1 + 7);

    const lookup = await fetch(`${dashboard.baseUrl}/api/admin/keys/lookup`, {
      method: 'POST',
      headers: { cookie, 'content-type': 'application/json', origin: dashboard.baseUrl },
      body: JSON.stringify({ principalId: principal, service: 'orders', key: 'order-1', reason: 'example service test' }),
    });
    expect(lookup.status).toBe(200);
    const { records } = (await lookup.json()) as { records: { service: string; scope: string; state: string; statusCode: number; correlationId: string }[] };
    expect(records).toEqual([expect.objectContaining({ service: 'orders', scope: 'POST /orders', state: 'completed', statusCode: 201, correlationId })]);
    // The service's policy was created from its default and is on the retention review.
    const retention = await fetch(`${dashboard.baseUrl}/api/admin/retention`, { headers: { cookie: cookies.get('compliance') ?? '' } });
    const review = (await retention.json()) as { policies: { service: string; endpoint: string; retryWindowSeconds: number }[] };
    expect(review.policies).toContainEqual(expect.objectContaining({ service: 'orders', endpoint: 'POST /orders', retryWindowSeconds: 86_400 }));
  }, 120_000);
});
