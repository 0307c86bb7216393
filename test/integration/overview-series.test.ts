// The overview's pre-aggregated series (migration 0021): the flush writes each step for each
// (service, scope), each service ('*' scope) and the store ('*', '*'); the overview reads one of
// those levels, so every range reads rows bounded by its steps, not by the number of scopes. A
// '*' row is never counted twice nor shown as a scope, by any reader; the statements are served
// by the series' primary key on a young table and on a loaded one, reading a bounded number of
// rows; and an existing install's buckets are carried into the series by the migration.
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { FlowRecorder, observeAll, SERIES_STEPS, type ClaimOutcome } from '@retrysafe/store';
import { MIGRATIONS_FOLDER, migrateDatabase, readJournal } from '../../db/migrate';
import { explainPrepared, explainPrepared as explain, recordingQueryable, type PlanCacheMode } from '../../packages/store/test/helpers/plan';
import { readAlertInputs } from '../../server/metrics/alerts';
import { knownOverviewNames } from '../../server/metrics/overview-names';
import { overviewQuery, overviewRanges, overviewSteps, readOverview, type Overview, type OverviewRange } from '../../server/metrics/overview';
import { createPrometheusMetrics } from '../../server/metrics/prometheus';
import { seriesExpiry } from '../../server/metrics/rollup';
import { rebuildSeries } from '../../server/metrics/series';
import { createTestDatabase, useTestDatabase } from '../helpers/database';
import { storeSeriesInTimeOrder } from '../helpers/series';

const ranges = Object.keys(overviewRanges) as OverviewRange[];
const total = (overview: Overview, outcome?: ClaimOutcome) =>
  overview.flow.reduce((sum, point) => sum + (outcome === undefined ? point.claims : point.counts[outcome]), 0);

/** EXPLAIN ANALYZE of `text` prepared with `values` under a plan cache mode: every node. */
const analyze = (client: Pick<pg.ClientBase, 'query' | 'escapeLiteral'>, text: string, values: readonly unknown[], mode: PlanCacheMode) =>
  explainPrepared(client, text, values, mode, { analyze: true });

describe('overview series', () => {
  const db = useTestDatabase();

  it('counts each claim once at every level: the store is the sum of its services, a service of its scopes; no reader shows a scope "*"', async () => {
    const services = ['demo', 'orders'];
    const scopes = ['POST /a', 'POST /b', 'POST /c'];
    // Two instances, as two server processes flush: each adds its own counts to the same rows.
    const prometheus = createPrometheusMetrics(db.pool);
    const recorders = [new FlowRecorder(db.pool, { flushIntervalMs: 3_600_000 }), new FlowRecorder(db.pool, { flushIntervalMs: 3_600_000 })];
    const observers = recorders.map((recorder) => observeAll(recorder, prometheus.observer));
    const expected = new Map<string, number>();
    let n = 0;
    for (const service of services) {
      for (const [i, scope] of scopes.entries()) {
        for (const outcome of ['new', 'replay', 'conflict', 'mismatch'] as const) {
          const count = 3 + i * 5 + outcome.length + (service === 'orders' ? 11 : 0);
          for (let j = 0; j < count; j += 1) observers[(n += 1) % 2]?.record({ service, scope, outcome, claimLatencyMs: 1 + (j % 40) });
          expected.set(`${service}|${scope}|${outcome}`, count);
        }
      }
    }
    await Promise.all(recorders.map((recorder) => recorder.flush()));
    const sum = (filter: (service: string, scope: string, outcome: string) => boolean) =>
      [...expected].filter(([key]) => filter(...(key.split('|') as [string, string, string]))).reduce((acc, [, count]) => acc + count, 0);

    // The per-scope tables, which every other reader uses, hold no merged row.
    const merged = await db.pool.query(
      `SELECT 1 FROM flow_counts_minute WHERE service = '*' OR scope = '*' UNION ALL SELECT 1 FROM claim_latency_minute WHERE service = '*' OR scope = '*'
       UNION ALL SELECT 1 FROM flow_counts_hour WHERE service = '*' OR scope = '*' UNION ALL SELECT 1 FROM claim_latency_hour WHERE service = '*' OR scope = '*'`,
    );
    expect(merged.rowCount).toBe(0);
    // At every step, each level is the sum of the one below it, for the counts and the histograms.
    for (const table of ['flow_counts_series', 'claim_latency_series']) {
      const { rows } = await db.pool.query<{ step: number; store: string; services: string; scopes: string }>(
        `SELECT step, sum(count) FILTER (WHERE service = '*' AND scope = '*') AS store,
                sum(count) FILTER (WHERE service <> '*' AND scope = '*') AS services,
                sum(count) FILTER (WHERE service <> '*' AND scope <> '*') AS scopes
         FROM ${table} GROUP BY step ORDER BY step`,
      );
      const all = String(sum(() => true));
      expect(rows).toEqual(SERIES_STEPS.map((step) => ({ step, store: all, services: all, scopes: all })));
    }

    for (const range of ranges) {
      const all = await readOverview(db.pool, overviewQuery.parse({ range }));
      expect(all.scopes).toEqual(scopes);
      expect(all.services).toEqual(services);
      expect(total(all)).toBe(sum(() => true));
      let ofScopes = 0;
      for (const service of services) {
        const one = await readOverview(db.pool, overviewQuery.parse({ range, service }));
        expect(total(one)).toBe(sum((v) => v === service));
        for (const scope of scopes) {
          const pick = await readOverview(db.pool, overviewQuery.parse({ range, service, scope }));
          expect(total(pick, 'conflict')).toBe(sum((v, s, o) => v === service && s === scope && o === 'conflict'));
          ofScopes += total(pick);
        }
      }
      // All scopes is exactly the sum of the scopes: the merged rows are not added to them.
      expect(ofScopes).toBe(total(all));
      // A scope without a service: its rows in every service.
      const anyB = await readOverview(db.pool, overviewQuery.parse({ range, scope: 'POST /b' }));
      expect(total(anyB)).toBe(sum((_, s) => s === 'POST /b'));
      expect(all.flow.some((point) => point.p99Ms !== null)).toBe(true);
    }
    // '*' is not a scope the overview takes, nor a name the URL may carry.
    expect(overviewQuery.safeParse({ range: '1h', scope: '*' }).success).toBe(false);
    expect((await knownOverviewNames(db.pool, { scope: '*' })).scopes.some((known) => known.scope === '*')).toBe(false);
    // The per-scope alerts and the Prometheus counters see each scope once, and no '*'.
    const inputs = await readAlertInputs(db.pool);
    expect((inputs.flowByScope ?? []).map((series) => series.scope).sort()).toEqual([...scopes, ...scopes].sort());
    expect(inputs.flow.reduce((acc, point) => acc + point.claims, 0)).toBe(sum(() => true));
    const text = await prometheus.registry.metrics();
    expect(text).not.toMatch(/scope="\*"|service="\*"/);
    const claims = [...text.matchAll(/^retrysafe_claims_total\{[^}]*\} (\d+)$/gm)].reduce((acc, match) => acc + Number(match[1]), 0);
    expect(claims).toBe(sum(() => true));
    // A scope (or service) really named '*' is folded into the merged row, never written twice.
    recorders[0]?.record({ service: 'demo', scope: '*', outcome: 'new' });
    await recorders[0]?.flush();
    const all = await readOverview(db.pool, overviewQuery.parse({ range: '1h' }));
    expect(total(all)).toBe(sum(() => true) + 1);
    expect(all.scopes).toEqual(scopes);
  });

  // 180 EXPLAIN ANALYZEs (60 statements, young in one plan mode, loaded in two): on a loaded
  // machine more than the default 30 s.
  it('reads each range from one key range of its step, bounded by the steps, on a young table and on a loaded one', { timeout: 120_000 }, async () => {
    // Young means never analyzed (reltuples -1: the planner assumes ten pages), as after an
    // install; TRUNCATE makes it so. Autovacuum is held off until that check is done: the rows
    // the test above wrote count towards an ANALYZE, which, run on the emptied table, read it as
    // analyzed and empty (zero pages, a Seq Scan the cheapest plan), a state the install never
    // plans in and that a full suite's timing sometimes produced.
    const tables = ['flow_counts_minute', 'claim_latency_minute', 'flow_counts_series', 'claim_latency_series'];
    for (const table of tables) await db.pool.query(`ALTER TABLE ${table} SET (autovacuum_enabled = false)`);
    await db.pool.query(`TRUNCATE ${tables.join(', ')}`);
    const { rows: young } = await db.pool.query<{ relname: string; reltuples: number }>(
      'SELECT relname, reltuples FROM pg_class WHERE oid = ANY($1::regclass[]) ORDER BY relname',
      [tables],
    );
    expect(young.map((row) => row.reltuples)).toEqual([-1, -1, -1, -1]);
    const statements = async () => {
      const recorded = recordingQueryable(db.pool);
      for (const range of ranges) {
        await readOverview(recorded.db, overviewQuery.parse({ range }));
        await readOverview(recorded.db, overviewQuery.parse({ range, service: 'demo' }));
        await readOverview(recorded.db, overviewQuery.parse({ range, service: 'demo', scope: 'POST /api/v1/scope-7' }));
        await readOverview(recorded.db, overviewQuery.parse({ range, scope: 'POST /api/v1/scope-7' }));
      }
      return recorded.statements.filter((statement) => /flow_counts_series|claim_latency_series/.test(statement.text));
    };
    const check = async (label: string, pairs: number) => {
      const client = await db.pool.connect();
      try {
        const recorded = await statements();
        expect(recorded.length).toBe(ranges.length * 4 * 3);
        // A young table's plan matters in generic mode, the one a named statement keeps; a loaded
        // one's in both.
        for (const mode of label === 'young' ? (['force_generic_plan'] as const) : (['force_custom_plan', 'force_generic_plan'] as const)) {
          for (const statement of recorded) {
            const nodes = await analyze(client, statement.text, statement.values, mode);
            const scans = nodes.filter((node) => /_series/.test(node['Relation Name'] ?? node['Index Name'] ?? ''));
            const where = { label, mode, statement: statement.text.replace(/\s+/g, ' ').slice(0, 80) };
            // An index scan of the key, or a bitmap of the same range (on rows in time order,
            // as the flush writes them, the key's heap order is scattered and a bitmap cheaper).
            expect({ ...where, scans: scans.map((node) => node['Node Type']).filter((type) => !/^(Index (Only )?Scan|Bitmap (Heap|Index) Scan)$/.test(type)) }).toEqual({ ...where, scans: [] });
            expect({ ...where, indexes: [...new Set(scans.flatMap((node) => (node['Node Type'] === 'Bitmap Heap Scan' ? [] : [node['Index Name']])))].filter((name) => !/_series_pkey$/.test(name ?? '')) }).toEqual({ ...where, indexes: [] });
            const read = scans
              .filter((node) => node['Node Type'] !== 'Bitmap Index Scan')
              .reduce((acc, node) => acc + (node['Actual Rows'] ?? 0) * (node['Actual Loops'] ?? 1) + (node['Rows Removed by Filter'] ?? 0) + (node['Rows Removed by Index Recheck'] ?? 0), 0);
            const step = Number(statement.values[0]);
            const steps = Math.max(...ranges.filter((range) => overviewSteps[range] === step).map((range) => overviewRanges[range] / step));
            // A series read: at most one row per step and outcome or latency bucket (36), per
            // service of the level (two here when a scope is picked without a service). The
            // scopes: a few index probes per (service, scope) pair kept at the step.
            const bound = /WITH RECURSIVE/.test(statement.text) ? 3 * (pairs + 1) : 2 * (steps + 1) * 36;
            expect({ ...where, read: read <= bound }).toEqual({ ...where, read: true });
          }
        }
      } finally {
        client.release();
      }
    };
    // Young: never analyzed, empty.
    await check('young', 0);
    for (const table of tables) await db.pool.query(`ALTER TABLE ${table} RESET (autovacuum_enabled)`);
    // Loaded: 50 scopes of the demo service and one of another, six hours of minutes, five
    // outcomes and six latency buckets each, as the flush writes them; then analyzed.
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', v, s, o, 10 + m % 7
       FROM generate_series(0, 359) AS m,
            (SELECT 'demo' AS v, 'POST /api/v1/scope-' || n AS s FROM generate_series(0, 49) AS n UNION ALL SELECT 'orders', 'POST /api/v1/scope-7') AS sc,
            unnest(ARRAY['new', 'replay', 'conflict', 'mismatch', 'takeover']) AS o;
       INSERT INTO claim_latency_minute (minute, service, scope, bucket, count)
       SELECT date_trunc('minute', now()) - m * interval '1 minute', 'demo', 'POST /api/v1/scope-' || n, b, 3
       FROM generate_series(0, 359) AS m, generate_series(0, 49) AS n, generate_series(8, 13) AS b;`,
    );
    await rebuildSeries(db.pool);
    // In time order, as the flush writes them (the time indexes' correlation decides the
    // expiry's generic plan, whose cutoff the planner cannot see).
    await storeSeriesInTimeOrder(db.pool);
    await db.pool.query('ANALYZE flow_counts_series; ANALYZE claim_latency_series');
    // 51 pairs and the three merged levels.
    await check('loaded', 51 + 3);
    // The roll-up's expiry of the series, as it runs every minute (the oldest minutes of the six
    // hours): a range of each partial time index.
    const client = await db.pool.connect();
    try {
      for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
        for (const expiry of seriesExpiry({ minuteRetentionMs: 6 * 3_600_000 - 120_000, hourRetentionMs: 35 * 86_400_000 })) {
          const plan = await explain(client, expiry.text, expiry.values, mode);
          const scans = plan.filter((node) => /_series/.test(node['Relation Name'] ?? node['Index Name'] ?? '') && node['Node Type'] !== 'ModifyTable');
          const where = { mode, text: expiry.text };
          expect({ ...where, seqScans: scans.filter((node) => node['Node Type'] === 'Seq Scan').length }).toEqual({ ...where, seqScans: 0 });
          expect({ ...where, partialIndex: scans.some((node) => /_series_(minutes|hours)_at_idx$/.test(node['Index Name'] ?? '')) }).toEqual({ ...where, partialIndex: true });
        }
      }
    } finally {
      client.release();
    }
  });
});

describe('migration 0021 on an existing install', () => {
  it('carries the minute and hour buckets into the series at every level', async () => {
    const db = await createTestDatabase({ empty: true });
    const folder = await mkdtemp(join(tmpdir(), 'retrysafe-migrations-'));
    const client = new pg.Client({ connectionString: db.url });
    try {
      await cp(MIGRATIONS_FOLDER, folder, { recursive: true });
      const journalPath = join(folder, 'meta', '_journal.json');
      const journal = JSON.parse(await readFile(journalPath, 'utf8')) as { entries: { idx: number; tag: string }[] };
      journal.entries = journal.entries.filter((entry) => entry.tag < '0021');
      await writeFile(journalPath, JSON.stringify(journal));
      await migrateDatabase(db.url, { folder });
      await client.connect();
      await client.query(
        `INSERT INTO retrysafe.flow_counts_minute (minute, service, scope, outcome, count)
         SELECT date_trunc('minute', now()) - m * interval '1 minute', v, s, 'new', 2 FROM generate_series(0, 29) AS m,
                (VALUES ('demo', 'POST /a'), ('demo', 'POST /b'), ('orders', 'POST /a')) AS t(v, s);
         INSERT INTO retrysafe.claim_latency_minute (minute, service, scope, bucket, count)
         SELECT date_trunc('minute', now()) - m * interval '1 minute', 'demo', 'POST /a', 9, 1 FROM generate_series(0, 29) AS m;
         INSERT INTO retrysafe.flow_counts_hour (hour, service, scope, outcome, count)
         VALUES (date_trunc('hour', now()) - interval '3 days', 'demo', 'POST /a', 'conflict', 40), (date_trunc('hour', now()) - interval '3 days', 'orders', 'POST /c', 'new', 7)`,
      );
      const result = await migrateDatabase(db.url);
      expect(result.applied[0]).toBe('0021_flow_series');
      expect(result.current).toBe((await readJournal()).at(-1)?.tag);
      await client.query('SET search_path = retrysafe, retrysafe_demo, retrysafe_server, public');
      const day = await readOverview(client, overviewQuery.parse({ range: '24h' }));
      expect(day.scopes).toEqual(['POST /a', 'POST /b']);
      expect(total(day)).toBe(180);
      expect(day.flow.some((point) => point.p50Ms !== null)).toBe(true);
      const week = await readOverview(client, overviewQuery.parse({ range: '7d' }));
      expect(week.scopes).toEqual(['POST /a', 'POST /b', 'POST /c']);
      expect({ all: total(week), conflicts: total(week, 'conflict') }).toEqual({ all: 227, conflicts: 40 });
      expect(total(await readOverview(client, overviewQuery.parse({ range: '30d', service: 'orders' })))).toBe(67);
    } finally {
      await client.end();
      await rm(folder, { recursive: true, force: true });
      await db.drop();
    }
  });
});
