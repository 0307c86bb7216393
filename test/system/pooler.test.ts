// Issue #26, points 2 and 3 with a started server: DATABASE_URL through a real PgBouncer in
// transaction mode (DATABASE_POOLER=transaction; it refuses any startup parameter but
// extra_float_digits), the dashboard's login through it too. With DATABASE_DIRECT_URL the start
// migrates over it and the sweeper runs there; without it the start refuses to migrate and the
// server runs without its sweeper, saying why, while requests (API, sign-in, dashboard) are served.
// Either way the request path through the pooler answers /api/health 200 and makes 0 duplicate
// effects: payments created, replayed and sent BURST at once leave one payment row per key.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { DASHBOARD_LOGIN } from '../../db/dashboard-access';
import { createTenant, type CreatedTenant } from '../../server/demo/tenants';
import { createTestDatabase, dashboardUrlFor } from '../helpers/database';
import { submitLoginForm } from '../helpers/login-form';
import { hasPgBouncer, preparedPgBouncerPath, startPgBouncer, type PgBouncer } from '../../packages/store/test/helpers/pgbouncer';
import { startServer, testAdmin, type RunningServer } from '../helpers/server';
import pg from 'pg';

function through(bouncer: PgBouncer, url: string): string {
  const pooled = new URL(url);
  pooled.hostname = '127.0.0.1';
  pooled.port = String(bouncer.port);
  return pooled.toString();
}

const BURST = 16;

/**
 * Through the pooler: the health check answers 200; payments created and replayed (one key at a
 * time, then BURST identical requests at once) each make exactly one payment row, every other
 * answer a byte-identical replay or a 409 with Retry-After; the admin signs in and reads the overview.
 */
async function exercise(server: RunningServer, tenant: CreatedTenant, directUrl: string, prefix: string): Promise<void> {
  expect((await fetch(`${server.baseUrl}/api/health`)).status).toBe(200);
  const pay = (key: string) =>
    fetch(`${server.baseUrl}/api/v1/payments`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.apiKey}`, 'idempotency-key': key, 'content-type': 'application/json' },
      body: JSON.stringify({ amount: 1200, currency: 'EUR', description: key }),
    }).then(async (response) => ({
      status: response.status,
      replayed: response.headers.get('idempotent-replayed'),
      retryAfter: response.headers.get('retry-after'),
      body: Buffer.from(await response.arrayBuffer()),
    }));
  const keys = [1, 2, 3].map((n) => `${prefix}-${n}`);
  for (const key of keys) {
    const first = await pay(key);
    expect(first.status).toBe(201);
    expect(first.replayed).toBeNull();
    const replay = await pay(key);
    expect(replay.status).toBe(201);
    expect(replay.replayed).toBe('true');
    expect(replay.body.equals(first.body)).toBe(true);
  }
  const burstKey = `${prefix}-burst`;
  const answers = await Promise.all(Array.from({ length: BURST }, () => pay(burstKey)));
  const originals = answers.filter((answer) => answer.status === 201 && answer.replayed === null);
  expect(originals).toHaveLength(1);
  for (const answer of answers) {
    if (answer === originals[0]) continue;
    if (answer.status === 409) {
      expect(Number(answer.retryAfter)).toBeGreaterThanOrEqual(1);
      continue;
    }
    expect(answer.status).toBe(201);
    expect(answer.replayed).toBe('true');
    expect(answer.body.equals(originals[0]?.body ?? Buffer.alloc(0))).toBe(true);
  }
  // 0 duplicate effects: one payment row per key, counted on the database itself.
  const owner = new pg.Client({ connectionString: directUrl });
  await owner.connect();
  try {
    const { rows } = await owner.query<{ description: string; n: number }>(
      'SELECT description, count(*)::int AS n FROM retrysafe_demo.payments WHERE principal_id = $1 AND description = ANY($2) GROUP BY description ORDER BY description',
      [tenant.principalId, [...keys, burstKey]],
    );
    expect(rows).toEqual([...keys, burstKey].sort().map((description) => ({ description, n: 1 })));
  } finally {
    await owner.end();
  }
  const signedIn = await submitLoginForm(server.baseUrl, testAdmin, {}, { waitWhenBusy: true });
  expect(signedIn.status).toBe(303);
  const cookie = signedIn.setCookie.map((line) => line.split(';')[0]).join('; ');
  const overview = await fetch(`${server.baseUrl}/api/admin/overview?range=1h`, { headers: { cookie } });
  expect(overview.status).toBe(200);
}

describe.skipIf(!hasPgBouncer)('the server through PgBouncer in transaction mode', () => {
  let database: Awaited<ReturnType<typeof createTestDatabase>> | undefined;
  let bouncer: PgBouncer | undefined;
  let tenant: CreatedTenant | undefined;

  beforeAll(async () => {
    // Postgres's default search_path: through the pooler the server's comes from its roles' settings.
    database = await createTestDatabase({ serverSearchPath: false });
    bouncer = await startPgBouncer({ upstreamUrl: database.url, mode: 'transaction', poolSize: 8, users: [{ name: DASHBOARD_LOGIN, password: inject('dashboardPassword') }] });
    const owner = new pg.Client({ connectionString: database.url });
    await owner.connect();
    await owner.query('SET search_path = retrysafe, retrysafe_demo, retrysafe_server');
    tenant = await createTenant(owner, 'Pooled Ltd');
    await owner.end();
  });
  afterAll(async () => {
    await bouncer?.stop();
    await database?.drop();
  });

  it('migrates over DATABASE_DIRECT_URL, runs the sweeper there and serves requests through the pooler', async () => {
    if (!bouncer || !database || !tenant) throw new Error('set-up failed');
    const server = await startServer(through(bouncer, database.url), {
      DATABASE_POOLER: 'transaction',
      DATABASE_DIRECT_URL: database.url,
      DASHBOARD_DATABASE_URL: through(bouncer, dashboardUrlFor(database.url)),
      DEMO_TRAFFIC: '0',
      SWEEP_INTERVAL_SECONDS: '1',
      LOG_LEVEL: 'info',
    });
    try {
      expect(server.output()).toContain('[retrysafe] Schema is current');
      await exercise(server, tenant, database.url, 'direct-url');
      const owner = new pg.Client({ connectionString: database.url });
      await owner.connect();
      try {
        // The sweeper ran (its runs are recorded) over the direct connection.
        for (let i = 0; i < 50; i += 1) {
          const { rows } = await owner.query<{ runs: number }>('SELECT count(*)::int AS runs FROM retrysafe.sweep_runs');
          if ((rows[0]?.runs ?? 0) > 0) break;
          await new Promise((done) => setTimeout(done, 200));
        }
        const { rows } = await owner.query<{ runs: number }>('SELECT count(*)::int AS runs FROM retrysafe.sweep_runs');
        expect(rows[0]?.runs).toBeGreaterThan(0);
      } finally {
        await owner.end();
      }
    } finally {
      await server.stop();
    }
  }, 600_000);

  it('without DATABASE_DIRECT_URL: does not migrate nor sweep, says why, and still serves requests', async () => {
    if (!bouncer || !database || !tenant) throw new Error('set-up failed');
    const server = await startServer(through(bouncer, database.url), {
      DATABASE_POOLER: 'transaction',
      DASHBOARD_DATABASE_URL: through(bouncer, dashboardUrlFor(database.url)),
      DEMO_TRAFFIC: '0',
      LOG_LEVEL: 'info',
    });
    try {
      expect(server.output()).toMatch(/not migrating: Migrating refused: .*set DATABASE_DIRECT_URL/);
      await exercise(server, tenant, database.url, 'no-direct-url');
      expect(server.output()).toMatch(/The sweeper refused: it holds a session advisory lock .*set DATABASE_DIRECT_URL/);
    } finally {
      await server.stop();
    }
  }, 600_000);
});

describe.skipIf(!preparedPgBouncerPath)('the server through a PgBouncer that tracks named statements (DATABASE_POOLER=transaction-prepared)', () => {
  let database: Awaited<ReturnType<typeof createTestDatabase>> | undefined;
  let bouncer: PgBouncer | undefined;
  let tenant: CreatedTenant | undefined;

  beforeAll(async () => {
    database = await createTestDatabase({ serverSearchPath: false });
    bouncer = await startPgBouncer({
      upstreamUrl: database.url,
      mode: 'transaction',
      poolSize: 8,
      binary: preparedPgBouncerPath,
      maxPreparedStatements: 200,
      users: [{ name: DASHBOARD_LOGIN, password: inject('dashboardPassword') }],
    });
    const owner = new pg.Client({ connectionString: database.url });
    await owner.connect();
    await owner.query('SET search_path = retrysafe, retrysafe_demo, retrysafe_server');
    tenant = await createTenant(owner, 'Prepared Ltd');
    await owner.end();
  });
  afterAll(async () => {
    await bouncer?.stop();
    await database?.drop();
  });

  it('starts, and serves the same requests with the same guarantees on named statements', async () => {
    if (!bouncer || !database || !tenant) throw new Error('set-up failed');
    const server = await startServer(through(bouncer, database.url), {
      DATABASE_POOLER: 'transaction-prepared',
      DATABASE_DIRECT_URL: database.url,
      DASHBOARD_DATABASE_URL: through(bouncer, dashboardUrlFor(database.url)),
      DEMO_TRAFFIC: '0',
      LOG_LEVEL: 'info',
    });
    try {
      await exercise(server, tenant, database.url, 'prepared');
      // The store's named statements went through the pooler's tracking: PgBouncer counts the
      // statements clients prepared, those it prepared on server connections, and the binds that
      // ran them (SHOW STATS, per database): far more runs than server-side parses.
      const admin = new pg.Client({ connectionString: bouncer.adminUrl });
      await admin.connect();
      try {
        const { rows } = await admin.query<{ database: string; total_client_parse_count: string; total_server_parse_count: string; total_bind_count: string }>('SHOW STATS');
        const name = new URL(database.url).pathname.slice(1);
        const stats = rows.find((row) => row.database === name);
        expect(Number(stats?.total_client_parse_count)).toBeGreaterThan(0);
        expect(Number(stats?.total_bind_count)).toBeGreaterThan(Number(stats?.total_server_parse_count));
      } finally {
        await admin.end();
      }
    } finally {
      await server.stop();
    }
  }, 600_000);
});
