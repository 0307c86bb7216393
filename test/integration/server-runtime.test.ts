// The server's composition root (server/runtime.ts): one runtime opens every pool of an
// instance, within DATABASE_CONNECTIONS, and its one stop() closes all of them, the dashboard's
// and sign-in's included once they were used, in order, with the database handed to it last.
// Counted in pg_stat_activity by application_name (every pool of the server names itself
// `retrysafe-*`; this file's own pools do not).
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOperator } from '../../server/auth/operators';
import { createOperatorAuth, signInOperator } from '../../server/auth/operator-auth';
import { readEnvironment } from '../../server/config';
import { connectionBudget } from '../../server/connection-budget';
import { createTenant } from '../../server/demo/tenants';
import { createServerRuntime, RuntimeStopping, type ServerRuntime, type ServerRuntimeOptions } from '../../server/runtime';
import { useTestDatabase } from '../helpers/database';
import { testSecrets } from '../helpers/server';

const PASSWORD = 'a long runtime test password';

/** The dashboard's operator auth as the Next bridge makes it (app/_lib/runtime.ts), without Next's cookie plugin. */
const operatorAuth: ServerRuntimeOptions['operatorAuth'] = (pool, settings) =>
  createOperatorAuth({ pool, secret: settings.authSecret, baseURL: settings.publicUrl, absoluteSessionSeconds: settings.absoluteSessionSeconds });

describe('the server runtime', () => {
  const db = useTestDatabase();
  let runtime: ServerRuntime | undefined;

  const environment = (extra: Record<string, string> = {}) =>
    readEnvironment({
      NODE_ENV: 'test',
      ...testSecrets,
      DATABASE_URL: db.url,
      DASHBOARD_DATABASE_URL: db.dashboardUrl,
      DEMO_TRAFFIC: '0',
      METRICS_FLUSH_SECONDS: '300',
      ...extra,
    });

  /** This database's connections of the server's pools, by application_name. */
  const connections = async (): Promise<Record<string, number>> => {
    const { rows } = await db.pool.query<{ name: string; n: number }>(
      `SELECT application_name AS name, count(*)::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND application_name LIKE 'retrysafe-%' GROUP BY 1 ORDER BY 1`,
    );
    return Object.fromEntries(rows.map((row) => [row.name, row.n]));
  };
  /** A backend leaves pg_stat_activity a moment after its client hung up. */
  const settled = async (): Promise<Record<string, number>> => {
    for (let attempt = 0; attempt < 50; attempt += 1) {
      const now = await connections();
      if (Object.keys(now).length === 0) return now;
      await sleep(100);
    }
    return connections();
  };

  beforeAll(async () => {
    await createOperator(db.pool, { email: 'ops@runtime.example', password: PASSWORD, role: 'operator' }, { system: 'test' });
  });
  afterAll(async () => {
    await runtime?.stop();
  });

  it('opens nothing until used, every pool once used, and leaves no connection after stop()', async () => {
    expect(await connections()).toEqual({});
    let released: { poolsEnded: boolean[] } | undefined;
    let dashboardPoolsEnded = () => false;
    const started = createServerRuntime({
      environment: environment({ DATABASE_CONNECTIONS: '24' }),
      operatorAuth,
      database: {
        release: () => {
          // The database goes last: every pool is closed by then.
          released = { poolsEnded: [started.ownerPool.ended, dashboardPoolsEnded()] };
          return Promise.resolve();
        },
      },
    });
    runtime = started;
    // Made, not connected.
    expect(await connections()).toEqual({});

    // The request path: the store's pool and the owner's (the demo API's tenant lookup).
    const services = await started.services();
    const tenant = await createTenant(db.pool, 'runtime');
    const response = await services.demo.payments(
      new Request('http://localhost/api/v1/payments', {
        method: 'POST',
        headers: { authorization: `Bearer ${tenant.apiKey}`, 'idempotency-key': 'runtime-1', 'content-type': 'application/json' },
        body: JSON.stringify({ amount: 700, currency: 'EUR' }),
      }),
    );
    expect(response.status).toBe(201);

    // The dashboard: a read on its role's pool, and a sign-in on sign-in's pool.
    const dashboard = started.dashboard();
    expect(started.dashboard()).toBe(dashboard);
    await dashboard.pools.readPool.query('SELECT 1');
    const signedIn = await signInOperator(dashboard.auth, dashboard.pools.pool, { email: 'ops@runtime.example', password: PASSWORD }, { headers: new Headers(), address: '192.0.2.7' });
    expect(signedIn.ok).toBe(true);
    dashboardPoolsEnded = () => dashboard.pools.pool.ended && dashboard.authPool.ended;

    const open = await connections();
    expect(Object.keys(open)).toEqual(['retrysafe-app', 'retrysafe-auth', 'retrysafe-dashboard', 'retrysafe-store']);
    // Each within its share of DATABASE_CONNECTIONS=24.
    const budget = connectionBudget(24);
    expect(open['retrysafe-store']).toBeLessThanOrEqual(budget.store);
    expect(open['retrysafe-app']).toBeLessThanOrEqual(budget.app);
    expect(open['retrysafe-dashboard']).toBeLessThanOrEqual(budget.dashboard);
    expect(open['retrysafe-auth']).toBeLessThanOrEqual(budget.auth);

    // stop() says what each pool held when it closed it: what pg_stat_activity showed.
    expect((await started.stop()).connectionsClosed).toEqual(open);
    expect(released).toEqual({ poolsEnded: [true, true] });
    expect(await settled()).toEqual({});
    // Stopped for good: nothing reopens a pool.
    await expect(started.services()).rejects.toBeInstanceOf(RuntimeStopping);
    expect(() => started.dashboard()).toThrow(RuntimeStopping);
    await started.stop(); // a second stop is harmless
    expect(await connections()).toEqual({});
  });

  it('sizes every pool from DATABASE_CONNECTIONS', async () => {
    const small = createServerRuntime({ environment: environment({ DATABASE_CONNECTIONS: '12' }), operatorAuth });
    try {
      const budget = connectionBudget(12);
      expect(small.ownerPool.options.max).toBe(budget.app);
      expect(small.dashboard().pools.pool.options.max).toBe(budget.dashboard);
      expect(small.dashboard().authPool.options.max).toBe(budget.auth);
      // Eighty concurrent reads of the owner's pool stay within its share.
      await Promise.all(Array.from({ length: 80 }, () => small.ownerPool.query('SELECT pg_sleep(0.01)')));
      expect((await connections())['retrysafe-app']).toBeLessThanOrEqual(budget.app);
    } finally {
      await small.stop();
    }
    expect(await settled()).toEqual({});
  });
});
