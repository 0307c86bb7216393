// SIGTERM stops the server gracefully: the HTTP front stops listening, lets requests in flight
// finish and calls the services' stop(), whose last flush writes the flow counts recorded since
// the previous one. The flush interval here is 300 s, so only that last flush can write them.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers/database';
import { createDemoHarness } from '../helpers/demo';
import { startServer, type RunningServer } from '../helpers/server';

describe('a graceful stop (SIGTERM)', () => {
  const db = useTestDatabase();
  let server: RunningServer | undefined;

  beforeAll(async () => {
    server = await startServer(db.url, { DEMO_TRAFFIC: '0', METRICS_FLUSH_SECONDS: '300' });
  });
  afterAll(async () => {
    await server?.stop();
  });

  const flowCount = async () =>
    Number((await db.pool.query<{ n: string }>(`SELECT coalesce(sum(count), 0) AS n FROM flow_counts_minute WHERE service = 'demo'`)).rows[0]?.n);

  it('flushes the flow counts recorded since the last flush before exiting', async () => {
    const base = server?.baseUrl ?? '';
    const tenant = await createDemoHarness(db.pool).tenant();
    const send = (key: string) =>
      fetch(`${base}/api/v1/payments`, {
        method: 'POST',
        headers: { authorization: `Bearer ${tenant.apiKey}`, 'idempotency-key': key, 'content-type': 'application/json' },
        body: JSON.stringify({ amount: 700, currency: 'EUR' }),
      });
    for (const key of ['stop-1', 'stop-2', 'stop-3']) expect((await send(key)).status).toBe(201);
    expect((await send('stop-1')).headers.get('idempotent-replayed')).toBe('true');
    // The boot's first flush may have run; nothing of these four requests is flushed yet.
    const before = await flowCount();
    await server?.stop();
    expect(await flowCount()).toBe(before + 4);
    expect(server?.output()).toContain('Stopped');
  });
});
