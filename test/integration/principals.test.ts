// Principals on the dashboard: display names (the demo's tenants, namePrincipal, the search by
// prefix), the lookup by correlation id (audited, metadata only, index-served) and the
// overview's principals behind conflicts, mismatches, rejections and stale claims, kept apart
// per service and scope.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FlowRecorder, namePrincipal, type ClaimOutcome } from '@retrysafe/store';
import { createTenant } from '../../server/demo/tenants';
import { PostgresKeyReads } from '@retrysafe/store/postgres';
import { correlationLookupSchema, lookUpCorrelation } from '../../server/idempotency/correlation';
import { postgresKeyAccess } from '../helpers/key-access';
import { principalSearchQuery, readPrincipalsBehind, searchPrincipals } from '../../server/metrics/principals';
import { overviewQuery, readOverview } from '../../server/metrics/overview';
import { explainPrepared as explain, recordingQueryable, type PlanCacheMode } from '../../packages/store/test/helpers/plan';
import { useTestDatabase } from '../helpers/database';
import { createTestStore, jsonResult, testPolicy } from '../../packages/store/test/helpers/store';

const SENTINEL = 'SENTINEL-correlation-77a1';

describe('principals', () => {
  const db = useTestDatabase();
  let dashboard: pg.Pool;

  beforeAll(() => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 2 });
  });
  afterAll(async () => {
    await dashboard.end();
  });

  it("names the demo's tenants and principals a service names; finds them by name prefix through the dashboard's role", async () => {
    const acme = await createTenant(db.pool, 'Acme Refunds');
    const other = randomUUID();
    await namePrincipal(db.pool, other, 'acme_%labs');
    await namePrincipal(db.pool, randomUUID(), 'Zeta');
    const unnamed = randomUUID();
    const search = (name: string) => searchPrincipals(dashboard, principalSearchQuery.parse({ name }));
    expect(await search('acme')).toEqual([
      { principalId: acme.principalId, name: 'Acme Refunds' },
      { principalId: other, name: 'acme_%labs' },
    ]);
    expect(await search('ACME R')).toEqual([{ principalId: acme.principalId, name: 'Acme Refunds' }]);
    // LIKE's wildcards are plain characters in a prefix.
    expect(await search('acme_%')).toEqual([{ principalId: other, name: 'acme_%labs' }]);
    expect(await search('acme%')).toEqual([]);
    // A whole id finds its principal, named or not.
    expect(await search(unnamed)).toEqual([{ principalId: unnamed, name: null }]);
    // Renaming replaces the name.
    await namePrincipal(db.pool, other, 'Beta Labs');
    expect(await search('acme')).toEqual([{ principalId: acme.principalId, name: 'Acme Refunds' }]);
    await expect(namePrincipal(db.pool, 'not-a-uuid', 'x')).rejects.toThrow(TypeError);
    await expect(namePrincipal(db.pool, randomUUID(), '  ')).rejects.toThrow(RangeError);
    expect(principalSearchQuery.safeParse({ name: '' }).success).toBe(false);
    expect(principalSearchQuery.safeParse({ name: 'a\u0000' }).success).toBe(false);
  });

  it('serves the name search from the prefix index, in the generic plan too', async () => {
    await db.pool.query(`INSERT INTO principal_names (principal_id, name) SELECT gen_random_uuid(), 'tenant ' || i FROM generate_series(1, 30000) AS i`);
    await db.pool.query('ANALYZE principal_names');
    const recorded = recordingQueryable(db.pool);
    await searchPrincipals(recorded.db, principalSearchQuery.parse({ name: 'tenant 12' }));
    const [statement] = recorded.statements;
    if (!statement) throw new Error('not recorded');
    const client = await db.pool.connect();
    try {
      for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
        const plan = await explain(client, statement.text, statement.values, mode);
        expect(plan.some((node) => node['Index Name'] === 'principal_names_name_prefix_idx'), mode).toBe(true);
        expect(plan.filter((node) => node['Node Type'] === 'Seq Scan')).toEqual([]);
      }
    } finally {
      client.release();
    }
  });

  it('looks a request up by its correlation id across the store: metadata and principal only, audited', async () => {
    const tenant = await createTenant(db.pool, 'Correlated Co');
    const { store } = createTestStore(db.pool);
    const outcome = await store.execute({
      principalId: tenant.principalId,
      key: 'refund-42',
      endpoint: 'POST /api/v1/refunds',
      method: 'POST',
      body: { description: SENTINEL },
      policy: testPolicy,
      mode: 'claim-first',
      work: () => Promise.resolve(jsonResult(201, { description: SENTINEL })),
    });
    const correlationId = outcome.correlationId;
    const { records } = await lookUpCorrelation(postgresKeyAccess(dashboard), { correlationId, reason: 'customer quoted this id' }, 'ops@example.com');
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({
      principalId: tenant.principalId,
      principalName: 'Correlated Co',
      service: 'demo',
      scope: 'POST /api/v1/refunds',
      key: 'refund-42',
      state: 'completed',
      statusCode: 201,
      correlationId,
    });
    expect(JSON.stringify(records)).not.toContain(SENTINEL);
    // A random (v4) id is no id this store issued: never seen, and said so.
    expect(await lookUpCorrelation(postgresKeyAccess(dashboard), { correlationId: randomUUID(), reason: 'a typo' }, 'ops@example.com')).toMatchObject({
      records: [],
      attempts: [],
      notFound: { why: 'never-seen', issuedAt: null },
    });
    const { rows } = await db.pool.query<{ actor: string; reason: string; target: unknown; details: unknown }>(
      "SELECT actor, reason, target, details FROM audit_log WHERE action = 'key.correlation_lookup' ORDER BY id",
    );
    expect(rows).toEqual([
      {
        actor: 'ops@example.com',
        reason: 'customer quoted this id',
        target: { correlationId },
        details: { records: 1, attempts: 0, principalId: tenant.principalId, service: 'demo', scope: 'POST /api/v1/refunds' },
      },
      { actor: 'ops@example.com', reason: 'a typo', target: expect.objectContaining({}) as unknown, details: { records: 0, attempts: 0 } },
    ]);
    expect(correlationLookupSchema.safeParse({ correlationId: 'abc', reason: 'why not' }).success).toBe(false);
    expect(correlationLookupSchema.safeParse({ correlationId, reason: '' }).success).toBe(false);
    expect(correlationLookupSchema.safeParse({ correlationId, reason: 'ok ok', extra: 1 }).success).toBe(false);
  });

  it('serves the correlation lookup from its index on a new, never-analyzed table and a large analyzed one, in the generic plan', async () => {
    const recorded = recordingQueryable(db.pool);
    await new PostgresKeyReads(recorded.db).correlationRecords(randomUUID());
    const [statement] = recorded.statements;
    if (!statement) throw new Error('not recorded');
    expect(statement.text).not.toMatch(/response_body/);
    const check = async () => {
      const client = await db.pool.connect();
      try {
        for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
          const plan = await explain(client, statement.text, statement.values, mode);
          const keyScans = plan.filter((node) => node['Relation Name'] === 'idempotency_keys');
          expect(keyScans.length, mode).toBeGreaterThan(0);
          for (const scan of keyScans) expect(scan['Index Name'], mode).toBe('idempotency_keys_correlation_idx');
        }
      } finally {
        client.release();
      }
    };
    await check();
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, response_status,
         response_content_type, response_ref, completed_at, expires_at)
       SELECT gen_random_uuid(), 'demo', 'POST /api/v1/payments', 'key-' || i, 'completed', decode(md5(i::text) || md5(i::text), 'hex'),
              gen_random_uuid(), 201, 'application/json', 'ref', now(), now() + interval '1 day'
       FROM generate_series(1, 100000) AS i`,
    );
    await db.pool.query('ANALYZE idempotency_keys');
    await check();
  });

  it('lists the principals behind the trouble per service and scope, with stale claims, names and shares', async () => {
    await db.pool.query('TRUNCATE principal_flow_minute, principal_flow_hour, principal_flow_day, flow_counts_minute');
    const [a, b, c] = [await createTenant(db.pool, 'Tenant A'), await createTenant(db.pool, 'Tenant B'), await createTenant(db.pool, 'Tenant C')].map((t) => t.principalId);
    if (!a || !b || !c) throw new Error('no tenants');
    const recorder = new FlowRecorder(db.pool);
    const send = (service: string, scope: string, principalId: string, outcome: ClaimOutcome, times: number) => {
      for (let i = 0; i < times; i += 1) recorder.record({ service, scope, principalId, outcome });
    };
    send('demo', 'POST /api/v1/refunds', a, 'new', 60);
    send('demo', 'POST /api/v1/refunds', a, 'conflict', 40);
    send('demo', 'POST /api/v1/payments', b, 'new', 250);
    send('demo', 'POST /api/v1/payments', b, 'mismatch', 2);
    send('demo', 'POST /api/v1/payments', c, 'new', 250);
    send('orders', 'POST /orders', c, 'rejected', 7);
    await recorder.stop();
    // A crashed claim of B's in payments, past its lease.
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
       VALUES ($1, 'demo', 'POST /api/v1/payments', 'stuck', 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), now() - interval '1 minute', now() + interval '1 day')`,
      [b],
    );
    const read = (query: Record<string, string>) => readOverview(dashboard, overviewQuery.parse({ range: '1h', ...query }));
    const refunds = await read({ service: 'demo', scope: 'POST /api/v1/refunds' });
    expect(refunds.principals.principals).toEqual([
      {
        principalId: a,
        name: 'Tenant A',
        counts: { conflict: 40, mismatch: 0, rejected: 0, takeover: 0, error: 0, claims: 100 },
        staleClaims: 0,
        share: { conflict: 0.4, mismatch: 0, rejected: 0, takeover: 0, error: 0 },
      },
    ]);
    expect(refunds.principals.k).toBe(20);
    expect(refunds.principals.errorBound.conflict).toBeCloseTo(40 / 21, 5);
    // Recorded now, so alike in every range: the 1-hour range reads the minutes, 6 and 24 hours
    // the hours, 7 and 30 days the days, all written by the same flush.
    for (const range of ['6h', '24h', '7d', '30d']) {
      const again = await read({ range, service: 'demo', scope: 'POST /api/v1/refunds' });
      expect([range, again.principals.principals]).toEqual([range, refunds.principals.principals]);
    }
    const payments = await read({ service: 'demo', scope: 'POST /api/v1/payments' });
    expect(payments.principals.principals.map((row) => [row.name, row.counts.mismatch, row.staleClaims, row.counts.claims])).toEqual([['Tenant B', 2, 1, 252]]);
    // The demo service as a whole (its scopes merged): A first, then B; nothing of orders.
    const demo = await read({ service: 'demo' });
    expect(demo.principals.principals.map((row) => row.name)).toEqual(['Tenant A', 'Tenant B']);
    const orders = await read({ service: 'orders' });
    expect(orders.principals.principals.map((row) => [row.name, row.counts.rejected])).toEqual([['Tenant C', 7]]);
    // The whole store: every service's.
    const all = await read({});
    expect(all.principals.principals.map((row) => row.name)).toEqual(['Tenant A', 'Tenant C', 'Tenant B']);
    // One scope name without a service: that scope in every service.
    const byScope = await read({ scope: 'POST /orders' });
    expect(byScope.principals.principals.map((row) => row.name)).toEqual(['Tenant C']);
  });

  it('ranks the same top 20 as a ranking of every principal of the range, stale claims included', async () => {
    await db.pool.query("TRUNCATE principal_flow_minute, principal_flow_hour, principal_flow_day; DELETE FROM idempotency_keys WHERE service = 'rank'");
    // 60 principals in one scope over 30 minutes: principal i has (i * 7) % 23 conflicts, i % 5
    // mismatches and 50 claims; the 25 with the fewest conflicts also hold stale claims, some
    // enough to rank on them alone.
    const principals = Array.from({ length: 60 }, (_, i) => `00000000-0000-0000-0000-${String(i).padStart(12, '0')}`);
    const conflicts = (i: number) => (i * 7) % 23;
    const mismatches = (i: number) => i % 5;
    const staleOf = (i: number) => (i < 25 ? (i % 9) * 2 : 0);
    await db.pool.query(
      `INSERT INTO principal_flow_minute (service, scope, minute, outcome, principal_id, count)
       SELECT 'rank', 'POST /r', date_trunc('minute', now()) - (i % 30) * interval '1 minute', o, p::uuid, c
       FROM unnest($1::text[]) WITH ORDINALITY AS t(p, i1), LATERAL (SELECT (i1 - 1)::int AS i) AS ii,
            LATERAL (VALUES ('conflict', ((i * 7) % 23)::bigint), ('mismatch', (i % 5)::bigint), ('claims', 50::bigint)) AS v(o, c)
       WHERE c > 0`,
      [principals],
    );
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
       SELECT p::uuid, 'rank', 'POST /r', 'stuck-' || i || '-' || n, 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), now() - interval '1 minute', now() + interval '1 day'
       FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS t(p, s, i), generate_series(1, s) AS n`,
      [principals, principals.map((_, i) => staleOf(i))],
    );
    const to = new Date(Date.now() + 60_000);
    const totals = { claims: 3000, conflict: 0, mismatch: 0, rejected: 0, takeover: 0, error: 0 };
    const behind = await readPrincipalsBehind(dashboard, { from: new Date(to.getTime() - 3_600_000), to, service: 'rank', scope: 'POST /r', services: ['rank'], totals });
    // Every principal's weight, ranked as the table ranks (weight, then id).
    const expected = principals
      .map((principalId, i) => ({ principalId, weight: conflicts(i) + mismatches(i) + staleOf(i), i }))
      .filter((row) => row.weight > 0)
      .sort((a, b) => b.weight - a.weight || (a.principalId < b.principalId ? -1 : 1))
      .slice(0, 20);
    expect(behind.principals.map((row) => row.principalId)).toEqual(expected.map((row) => row.principalId));
    for (const [index, row] of behind.principals.entries()) {
      const i = expected[index]?.i ?? -1;
      expect({ i, conflict: row.counts.conflict, mismatch: row.counts.mismatch, claims: row.counts.claims, stale: row.staleClaims }).toEqual({
        i,
        conflict: conflicts(i),
        mismatch: mismatches(i),
        claims: 50,
        stale: staleOf(i),
      });
    }
    // Some principal ranks on its stale claims alone (outside the 20 heaviest by flow).
    const byFlow = principals.map((principalId, i) => ({ principalId, flow: conflicts(i) + mismatches(i) })).sort((a, b) => b.flow - a.flow || (a.principalId < b.principalId ? -1 : 1));
    const flowTop = new Set(byFlow.slice(0, 20).map((row) => row.principalId));
    expect(behind.principals.some((row) => !flowTop.has(row.principalId))).toBe(true);
  });

  it("reads the principals table from one primary-key range of its range's table, never the roll-up's time indexes, young or loaded, custom or generic", async () => {
    // Young means never analysed, as on a fresh install. Autovacuum is held off until that check
    // is done: the rows the tests above wrote count towards an ANALYZE which, landing on the
    // emptied tables, would read them as analysed at zero pages (a Seq Scan the cheapest plan),
    // as overview-series.test.ts pinned.
    const flowTables = ['principal_flow_minute', 'principal_flow_hour', 'principal_flow_day'];
    for (const table of flowTables) await db.pool.query(`ALTER TABLE ${table} SET (autovacuum_enabled = false)`);
    await db.pool.query(`TRUNCATE ${flowTables.join(', ')}`);
    const to = new Date(Math.ceil(Date.now() / 60_000) * 60_000);
    const ranges = [1, 6, 24, 168, 720].map((hours) => ({ from: new Date(to.getTime() - hours * 3_600_000), to }));
    const tableOf = (hours: number) => (hours <= 1 ? 'principal_flow_minute' : hours <= 24 ? 'principal_flow_hour' : 'principal_flow_day');
    const totals = { claims: 1, conflict: 1, mismatch: 0, rejected: 0, takeover: 0, error: 0 };
    const check = async (label: string) => {
      for (const range of ranges) {
        for (const [service, scope] of [[null, null], ['load', 'POST /s-3']] as const) {
          const recorded = recordingQueryable(dashboard);
          await readPrincipalsBehind(recorded.db, { ...range, service, scope, services: ['load'], totals });
          const hours = (range.to.getTime() - range.from.getTime()) / 3_600_000;
          const statement = recorded.statements.find((candidate) => candidate.text.includes('principal_flow_'));
          // Each range reads its one table (minutes up to an hour, hours up to a day, then days).
          expect([hours, ['principal_flow_minute', 'principal_flow_hour', 'principal_flow_day'].filter((table) => statement?.text.includes(table))]).toEqual([hours, [tableOf(hours)]]);
          const client = await db.pool.connect();
          try {
            for (const mode of ['force_custom_plan', 'force_generic_plan'] as PlanCacheMode[]) {
              const nodes = await explain(client, statement?.text ?? '', statement?.values ?? [], mode);
              // Each scan of the table: its primary key (an index scan, or a bitmap of it).
              const scans = nodes.filter((node) => /^principal_flow_/.test(node['Relation Name'] ?? node['Index Name'] ?? ''));
              const where = { label, mode, hours, scope };
              expect({ ...where, scans: scans.map((node) => `${node['Node Type']} ${node['Index Name'] ?? node['Relation Name'] ?? ''}`).filter((scan) => !/_pkey$/.test(scan) && !/^Bitmap Heap Scan /.test(scan)) }).toEqual({ ...where, scans: [] });
              expect(scans.length).toBeGreaterThan(0);
              // The names of the 20 shown: probes of principal_names' key, never a scan of it.
              expect({ ...where, names: nodes.filter((node) => node['Relation Name'] === 'principal_names' && node['Node Type'] !== 'Index Scan' && node['Node Type'] !== 'Index Only Scan') }).toEqual({ ...where, names: [] });
            }
          } finally {
            client.release();
          }
        }
      }
    };
    // Young: never analyzed, empty.
    const { rows: young } = await db.pool.query<{ reltuples: number }>('SELECT reltuples FROM pg_class WHERE oid = ANY($1::regclass[])', [flowTables]);
    expect(young.map((row) => row.reltuples)).toEqual([-1, -1, -1]);
    await check('young');
    for (const table of flowTables) await db.pool.query(`ALTER TABLE ${table} RESET (autovacuum_enabled)`);
    // Loaded: 30 scopes (and the merged rows) of ten principals for three outcomes, two hours of
    // minutes, 26 hours and 35 days, then analyzed.
    await db.pool.query(
      `INSERT INTO principal_flow_minute (service, scope, minute, outcome, principal_id, count)
       SELECT v, s, date_trunc('minute', now()) - m * interval '1 minute', o, ('00000000-0000-0000-0000-' || lpad(p::text, 12, '0'))::uuid, 1 + p
       FROM generate_series(0, 119) AS m, (SELECT 'load' AS v, 'POST /s-' || n AS s FROM generate_series(0, 29) AS n UNION ALL SELECT '*', '*') AS g,
            unnest(ARRAY['claims', 'conflict', 'mismatch']) AS o, generate_series(0, 9) AS p;
       INSERT INTO principal_flow_hour (service, scope, hour, outcome, principal_id, count)
       SELECT v, s, date_trunc('hour', now()) - h * interval '1 hour', o, ('00000000-0000-0000-0000-' || lpad(p::text, 12, '0'))::uuid, 10 + p
       FROM generate_series(0, 25) AS h, (SELECT 'load' AS v, 'POST /s-' || n AS s FROM generate_series(0, 29) AS n UNION ALL SELECT '*', '*') AS g,
            unnest(ARRAY['claims', 'conflict', 'mismatch']) AS o, generate_series(0, 9) AS p;
       INSERT INTO principal_flow_day (service, scope, day, outcome, principal_id, count)
       SELECT v, s, date_bin('1 day', now(), timestamptz 'epoch') - d * interval '1 day', o, ('00000000-0000-0000-0000-' || lpad(p::text, 12, '0'))::uuid, 100 + p
       FROM generate_series(0, 35) AS d, (SELECT 'load' AS v, 'POST /s-' || n AS s FROM generate_series(0, 29) AS n UNION ALL SELECT '*', '*') AS g,
            unnest(ARRAY['claims', 'conflict', 'mismatch']) AS o, generate_series(0, 9) AS p;
       INSERT INTO principal_names (principal_id, name)
       SELECT ('00000000-0000-0000-0000-' || lpad(p::text, 12, '0'))::uuid, 'Tenant ' || p FROM generate_series(0, 9) AS p
       UNION ALL SELECT gen_random_uuid(), 'Other ' || i FROM generate_series(1, 4990) AS i
       ON CONFLICT (principal_id) DO NOTHING;
       ANALYZE principal_flow_minute, principal_flow_hour, principal_flow_day, principal_names`,
    );
    await check('loaded');
  });
});
