// SIGTERM stops the server gracefully: the HTTP front stops listening, lets requests in flight
// finish and calls the runtime's stop() (server/runtime.ts), whose last flush writes the flow
// counts recorded since the previous one (the flush interval here is 300 s, so only that last
// flush can write them), and which closes every pool it opened, the dashboard's and sign-in's
// included, before the process exits: its last line names what each pool held.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers/database';
import { createDemoHarness } from '../helpers/demo';
import { submitLoginForm } from '../helpers/login-form';
import { startServer, testAdmin, type RunningServer } from '../helpers/server';

describe('a graceful stop (SIGTERM)', () => {
  const db = useTestDatabase();
  let server: RunningServer | undefined;

  beforeAll(async () => {
    server = await startServer(db.url, { DEMO_TRAFFIC: '0', METRICS_FLUSH_SECONDS: '300' });
  });
  afterAll(async () => {
    await server?.stop();
  });

  /** This database's connections of the server's pools (every one names itself `retrysafe-*`), by application_name. */
  const connections = async (): Promise<Record<string, number>> => {
    const { rows } = await db.pool.query<{ name: string; n: number }>(
      `SELECT application_name AS name, count(*)::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND application_name LIKE 'retrysafe-%' GROUP BY 1 ORDER BY 1`,
    );
    return Object.fromEntries(rows.map((row) => [row.name, row.n]));
  };
  /** A backend leaves pg_stat_activity a moment after its client hung up. */
  const settled = async (): Promise<Record<string, number>> => {
    for (let attempt = 0; attempt < 50 && Object.keys(await connections()).length > 0; attempt += 1) await new Promise((done) => setTimeout(done, 100));
    return connections();
  };

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
    // The dashboard's pools and sign-in's in use too: a sign-in, then a dashboard route.
    const signedIn = await submitLoginForm(base, testAdmin, {}, { waitWhenBusy: true });
    expect(signedIn.status).toBe(303);
    const cookie = signedIn.setCookie.map((line) => line.split(';')[0]).join('; ');
    expect((await fetch(`${base}/api/admin/overview`, { headers: { cookie } })).status).toBe(200);
    const open = await connections();
    expect(Object.keys(open)).toEqual(expect.arrayContaining(['retrysafe-app', 'retrysafe-auth', 'retrysafe-dashboard', 'retrysafe-store']));
    // The boot's first flush may have run; nothing of these four requests is flushed yet.
    const before = await flowCount();
    await server?.stop();
    expect(await flowCount()).toBe(before + 4);
    const output = server?.output() ?? '';
    expect(output).toContain('Stopped');
    // The runtime closed the pools itself (not the exit): each as many connections as it held.
    const stopped = output.split('\n').filter((line) => line.includes('"msg":"runtime stopped"'));
    expect(stopped).toHaveLength(1);
    const closed = (JSON.parse(stopped[0] ?? '{}') as { connectionsClosed?: Record<string, number> }).connectionsClosed ?? {};
    for (const name of ['retrysafe-app', 'retrysafe-auth', 'retrysafe-dashboard', 'retrysafe-store']) expect(closed[name]).toBeGreaterThan(0);
    expect(await settled()).toEqual({});
    console.log(`connections: while running ${JSON.stringify(open)}, closed by stop() ${JSON.stringify(closed)}`);
  });
});
