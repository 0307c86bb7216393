// Every monitoring and dashboard query against a 10-million-row key store, its metrics for 50
// scopes and 5,000 active principals (the principals' top-K rows full in every scope, minute
// and hour): its time (median of 5) and its plan, beside count(*) for comparison. Target: each
// under 50 ms; the overview in every range (1 h, 24 h, 7 d, 30 d), all scopes and one, with
// its principals table. Then the cost on claims of the indexes only the dashboard needs
// ((principal_id, created_at) and correlation_id): 8 clients claiming new keys into the
// 10-million-row table, with the index and with it dropped, alternating rounds.
import pg from 'pg';
import { PostgresKeyReads, principalKeysStatement, storeStatementTexts } from '@retrysafe/store/postgres';
import { readAlertInputs } from '../server/metrics/alerts';
import { overviewQuery, overviewRanges, overviewSteps, readOverview, readOverviewSeries } from '../server/metrics/overview';
import { readBaseline } from '../server/metrics/sampler';
import { readLatestScopeFigures, sampleScopeFigures } from '../server/metrics/scope-sample';
import { readStoreFigures } from '../server/metrics/store-figures';
import { readPrincipalsBehind } from '../server/metrics/principals';
import { storeSeriesInTimeOrder } from '../test/helpers/series';
import { rebuildSeries } from '../server/metrics/series';
import { explainPrepared, recordingQueryable, summarisePlan, type PlanNode } from '../packages/store/test/helpers/plan';
import { ensurePolicies } from '../server/retention/policies';
import { defaultPolicyFields } from '../server/demo/policies';
import type { BenchDatabase } from './database';
import { BENCH_SERVICE, loadCompletedKeys } from './fixtures';
import { formatRun, meanRun, runClosedLoop, type RunResult } from './measure';
import { createPool, DASHBOARD_POOL_IDLE_MS, DASHBOARD_POOL_MAX } from '../db/client';
import { CORRELATION_INDEX_PREDICATE, EXPIRY_INDEX_PREDICATE, PRINCIPAL_CREATED_INDEX_PREDICATE } from '@retrysafe/store/index-predicates';
import { randomBytes, randomUUID } from 'node:crypto';
import { newCorrelationId } from '@retrysafe/store';

const ROWS = Number(process.env.BENCH_STATS_ROWS ?? 10_000_000);
/** The tenant whose keys the dashboard lists: half a million of them, live. */
const LARGE_TENANT = '00000000-0000-0000-0000-00000000a46e';
/** Scopes of the metric series (the key table's claims stay in one: its size is what matters there). */
export const BENCH_SCOPES = 50;
/** Principals active in the principals' top-K rows. */
const ACTIVE_PRINCIPALS = 5_000;
/** The scope a one-scope overview picks. */
const SCOPE_PICKED = 'POST /api/v1/scope-7';

export interface QueryTiming {
  name: string;
  medianMs: number;
  plan: string;
}

async function median(run: () => Promise<unknown>): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < 5; i += 1) {
    const started = performance.now();
    await run();
    times.push(performance.now() - started);
  }
  times.sort((a, b) => a - b);
  return times[2] ?? NaN;
}

export interface IndexCost {
  withIndex: RunResult;
  withoutIndex: RunResult;
  /** Claims per second with the index over without it. */
  ratio: number;
}

/**
 * Flow and latency series of 50 scopes for two days of minutes and 35 days of hours (and the
 * overview's pre-aggregated series of them), and the
 * principals' rows at their bound: every (scope, minute) of the last 2 h, every (scope, hour) of
 * the last 26 and every (scope, day) of the last 35, plus the service's and the store's merged rows ('*'), with 20 principals (of 5,000)
 * for claims, conflicts, mismatches and takeovers and 5 for rejections and errors.
 */
export async function loadScopeMetrics(pool: pg.Pool): Promise<void> {
  const scopes = `(SELECT 'POST /api/v1/scope-' || n AS s FROM generate_series(0, ${BENCH_SCOPES - 1}) AS n)`;
  const principal = (expression: string) => `('00000000-0000-0000-0000-' || lpad(((${expression}) % ${ACTIVE_PRINCIPALS})::text, 12, '0'))::uuid`;
  const outcomes = `(VALUES ('claims', 20), ('conflict', 20), ('mismatch', 20), ('takeover', 20), ('rejected', 5), ('error', 5)) AS o(outcome, kept)`;
  const groups = `(SELECT '${BENCH_SERVICE}' AS v, s FROM ${scopes} sc UNION ALL SELECT '${BENCH_SERVICE}', '*' UNION ALL SELECT '*', '*') AS g`;
  await pool.query(`
    INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
    SELECT date_trunc('minute', now()) - m * interval '1 minute', '${BENCH_SERVICE}', s, o, 10 + m % 7
    FROM generate_series(0, 2880) AS m, ${scopes} sc, unnest(ARRAY['new', 'replay', 'conflict', 'mismatch', 'takeover']) AS o;
    INSERT INTO claim_latency_minute (minute, service, scope, bucket, count)
    SELECT date_trunc('minute', now()) - m * interval '1 minute', '${BENCH_SERVICE}', s, b, 3
    FROM generate_series(0, 2880) AS m, ${scopes} sc, generate_series(5, 25) AS b;
    INSERT INTO flow_counts_hour (hour, service, scope, outcome, count)
    SELECT date_trunc('hour', now()) - h * interval '1 hour', '${BENCH_SERVICE}', s, 'new', 600
    FROM generate_series(49, 840) AS h, ${scopes} sc;
    INSERT INTO principal_flow_minute (service, scope, minute, outcome, principal_id, count)
    SELECT v, s, date_trunc('minute', now()) - m * interval '1 minute', outcome, ${principal('m * 131 + p * 257 + length(s) * 7')}, 1 + p
    FROM generate_series(0, 120) AS m, ${groups}, ${outcomes}, generate_series(0, 19) AS p WHERE p < kept;
    -- As the flush writes them (migration 0023) and the roll-up merges them: every hour of the
    -- last 26 and every UTC day of the last 35, k counters each.
    INSERT INTO principal_flow_hour (service, scope, hour, outcome, principal_id, count)
    SELECT v, s, date_bin('1 hour', now(), timestamptz 'epoch') - h * interval '1 hour', outcome, ${principal('h * 131 + p * 257 + length(s) * 7')}, 10 + p
    FROM generate_series(0, 25) AS h, ${groups}, ${outcomes}, generate_series(0, 19) AS p WHERE p < kept;
    INSERT INTO principal_flow_day (service, scope, day, outcome, principal_id, count)
    SELECT v, s, date_bin('1 day', now(), timestamptz 'epoch') - d * interval '1 day', outcome, ${principal('d * 131 + p * 257 + length(s) * 7')}, 200 + p
    FROM generate_series(0, 35) AS d, ${groups}, ${outcomes}, generate_series(0, 19) AS p WHERE p < kept;
    INSERT INTO principal_names (principal_id, name)
    SELECT ${principal('i')}, 'Tenant ' || i FROM generate_series(0, ${ACTIVE_PRINCIPALS - 1}) AS i;`);
  // The overview's series (migration 0021) as the flush writes them beside those buckets: every
  // step of the overview's ranges for each scope, the service and the store; in time order, as a
  // live install holds them (the rebuild writes them in key order, which changes the plans).
  await rebuildSeries(pool);
  await storeSeriesInTimeOrder(pool);
}

export async function benchStatsQueries(database: BenchDatabase, log: (line: string) => void): Promise<{ timings: QueryTiming[]; recentKeysIndexCost: IndexCost | null; correlationIndexCost: IndexCost | null }> {
  // The dashboard's pool size: the overview's reads run at once on it, as they do in the dashboard.
  const pool = createPool(database.url, { applicationName: 'retrysafe-bench', max: DASHBOARD_POOL_MAX, idleTimeoutMillis: DASHBOARD_POOL_IDLE_MS });
  await ensurePolicies(pool, BENCH_SERVICE, defaultPolicyFields, 'bench');
  log(`loading ${ROWS.toLocaleString('en')} keys and two days of metrics...`);
  const started = performance.now();
  const { rows: clock } = await pool.query<{ from: Date }>("SELECT now() - interval '2 hours' AS from");
  await loadCompletedKeys(pool, ROWS, clock[0]?.from ?? new Date());
  await pool.query(`
    INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
    SELECT gen_random_uuid(), '${BENCH_SERVICE}', 'POST /api/v1/refunds', 'running-' || i, 'in_progress', sha256(i::text::bytea), gen_random_uuid(),
           now() + (i % 120 - 60) * interval '1 second', now() + interval '1 day'
    FROM generate_series(1, 5000) AS i;
    -- One large tenant with live keys: 500,000 in the last 20 hours, one in 500 failed.
    INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, response_status, response_ref, completed_at, created_at, expires_at)
    SELECT '${LARGE_TENANT}', '${BENCH_SERVICE}', 'POST /api/v1/payments', 'large-' || i, CASE WHEN i % 500 = 0 THEN 'failed' ELSE 'completed' END, sha256(i::text::bytea),
           gen_random_uuid(), CASE WHEN i % 500 = 0 THEN 500 ELSE 201 END, 'pay_' || i, now(), now() - interval '20 hours' + i * interval '144 ms',
           now() + interval '6 hours' + i * interval '144 ms'
    FROM generate_series(1, 500000) AS i;
    INSERT INTO store_stats (sampled_at, estimated_rows, baseline_rows, table_bytes, index_bytes, toast_bytes, cleanup_lag_seconds, stale_claims)
    SELECT date_trunc('minute', now()) - m * interval '1 minute', 10000000, 9000000, 0, 0, 0, 30, 0 FROM generate_series(0, 43200) AS m;
    INSERT INTO store_stats_scopes (sampled_at, service, scope, estimated_rows, response_bytes, sampled_fraction)
    SELECT date_trunc('minute', now()) - m * interval '1 minute', '${BENCH_SERVICE}', s, 5000000, 2000000000, 0.003
    FROM generate_series(0, 43200) AS m, unnest(ARRAY['POST /api/v1/payments', 'POST /api/v1/refunds']) AS s;`);
  await loadScopeMetrics(pool);
  await pool.query('VACUUM ANALYZE');
  log(`  loaded in ${((performance.now() - started) / 1000).toFixed(0)} s`);

  const explain = async (text: string, values: readonly unknown[] = []): Promise<PlanNode[]> => {
    const client = await pool.connect();
    try {
      return await explainPrepared(client, text, values);
    } finally {
      client.release();
    }
  };
  // Seq Scans worth a flag: on the key table, which grows with traffic x retention. The metric
  // series are bounded by their retention whatever the traffic (minutes x scopes x outcomes),
  // so for a range covering most of it the planner rightly reads it in order.
  const large = /^idempotency_keys/;
  const flagged: string[] = [];
  const planLine = (name: string, nodes: PlanNode[]) => {
    const seq = nodes.filter((node) => node['Node Type'] === 'Seq Scan' && large.test(node['Relation Name'] ?? ''));
    if (seq.length > 0) flagged.push(name);
    return `${summarisePlan(nodes)}${seq.length > 0 ? '   <-- SEQ SCAN' : ''}`;
  };

  const timings: QueryTiming[] = [];
  const measure = async (name: string, run: () => Promise<unknown>, plan: string) => {
    const medianMs = await median(run);
    timings.push({ name, medianMs, plan });
    log(`  ${name.padEnd(38)} ${medianMs.toFixed(2).padStart(9)} ms   ${plan}`);
  };
  /**
   * A read of several statements: its total time, then each statement's plan on its own line.
   * Timed on a warm pool, as the dashboard's serves a refreshing page (its connections open,
   * their statements prepared: DASHBOARD_POOL_IDLE_MS); the first run on this pool is logged too.
   */
  const measureComposite = async (name: string, run: (db: pg.Pool) => Promise<unknown>) => {
    const recorded = recordingQueryable(pool);
    await run(recorded.db);
    const first = performance.now();
    await run(pool);
    const firstMs = performance.now() - first;
    for (let i = 0; i < 4; i += 1) await run(pool);
    await measure(name, () => run(pool), `${recorded.statements.length} statements (first run ${firstMs.toFixed(1)} ms):`);
    for (const statement of recorded.statements) {
      const label = statement.text.replace(/\s+/g, ' ').trim().slice(0, 60);
      log(`  ${''.padEnd(52)}- ${label.padEnd(60)}  ${planLine(name, await explain(statement.text, statement.values))}`);
    }
  };

  log('');
  const { tableBytes } = await readStoreFigures(pool);
  await measureComposite('store figures (catalog + indexes)', (db) => readStoreFigures(db));
  await measureComposite('baseline (flow buckets)', (db) => readBaseline(db));
  await measureComposite('scope sample (~2,000 pages)', (db) => sampleScopeFigures(db, tableBytes));
  await measureComposite('latest scope figures', (db) => readLatestScopeFigures(db));
  await measureComposite('alert inputs (30 min)', (db) => readAlertInputs(db));
  for (const range of ['1h', '24h', '7d', '30d'] as const) {
    await measureComposite(`overview ${range}`, (db) => readOverview(db, overviewQuery.parse({ range })));
    await measureComposite(`overview ${range}, one scope`, (db) => readOverview(db, overviewQuery.parse({ range, service: BENCH_SERVICE, scope: SCOPE_PICKED })));
  }
  // The flow and latency series alone (migration 0021), as the overview reads them.
  for (const range of ['1h', '24h', '7d', '30d'] as const) {
    const step = overviewSteps[range];
    const to = new Date(Math.floor(Date.now() / (step * 1000)) * step * 1000 + step * 1000);
    const from = new Date(to.getTime() - overviewRanges[range] * 1000);
    await measureComposite(`series ${range}, all scopes`, (db) => readOverviewSeries(db, { step, from, to }));
    await measureComposite(`series ${range}, one scope`, (db) => readOverviewSeries(db, { step, from, to, service: BENCH_SERVICE, scope: SCOPE_PICKED }));
  }
  // The principals table alone, as the overview reads it (the totals only set the bound).
  const totals = { claims: 1e6, conflict: 1e4, mismatch: 1e4, rejected: 1e3, takeover: 1e3, error: 1e3 };
  for (const [range, hours] of [['1h', 1], ['24h', 24], ['7d', 168], ['30d', 720]] as const) {
    const to = new Date(Math.ceil(Date.now() / 60_000) * 60_000);
    const from = new Date(to.getTime() - hours * 3_600_000);
    for (const [label, service, scope] of [['all scopes', null, null], ['one scope', BENCH_SERVICE, SCOPE_PICKED]] as const) {
      await measureComposite(`principals ${range}, ${label}`, (db) => readPrincipalsBehind(db, { from, to, service, scope, services: [BENCH_SERVICE], totals }));
    }
  }
  const single = async (name: string, text: string, values: readonly unknown[] = []) =>
    measure(name, () => pool.query(text, [...values]), planLine(name, await explain(text, values)));
  await single('stale claims count', "SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress' AND lease_expires_at < now()");
  await single('oldest expiry', `SELECT min(expires_at) FROM idempotency_keys WHERE ${EXPIRY_INDEX_PREDICATE}`);
  const claimValues = ['00000000-0000-0000-0000-000000000001', 'POST /api/v1/payments', 'old-1', Buffer.alloc(32), '00000000-0000-0000-0000-000000000002', 30_000, 93_600_000, BENCH_SERVICE];
  await single('claim statement (for scale)', storeStatementTexts.claim, claimValues);
  // The dashboard's reads of the key table (through the same statements the pages use).
  const tenant = LARGE_TENANT;
  await measureComposite('dashboard: key lookup', (db) => new PostgresKeyReads(db).keyRecords({ principalId: tenant, key: 'large-1' }));
  for (const [name, filter] of [
    ['dashboard: recent keys, newest 50', {}],
    ['dashboard: recent keys, rare state', { state: 'failed' }],
    ['dashboard: recent keys, absent state', { state: 'in_progress' }],
    ['dashboard: recent keys, 10 h back', { after: { createdAtMicros: String((Date.now() - 36_000_000) * 1000), service: BENCH_SERVICE, scope: 'POST /api/v1/payments', key: 'large-1' } }],
  ] as const) {
    await measureComposite(name, (db) => db.query(principalKeysStatement({ principalId: tenant, limit: 50, ...filter })));
  }
  await measureComposite('dashboard: stale claims', (db) => new PostgresKeyReads(db).staleClaims(100));
  const { rows: quoted } = await pool.query<{ correlation_id: string }>("SELECT correlation_id FROM idempotency_keys WHERE principal_id = $1 AND scope = 'POST /api/v1/payments' AND key = 'large-77'", [LARGE_TENANT]);
  await measureComposite('dashboard: correlation-id lookup', (db) => new PostgresKeyReads(db).correlationRecords(quoted[0]?.correlation_id ?? randomUUID()));
  await single('count(*), for comparison', 'SELECT count(*) FROM idempotency_keys');
  const slow = timings.filter((timing) => !timing.name.startsWith('count(*)') && timing.medianMs >= 50);
  log(`  ${slow.length === 0 ? 'every monitoring and dashboard query under 50 ms' : `OVER 50 ms: ${slow.map((timing) => timing.name).join(', ')}`} (count(*) ${timings.at(-1)?.medianMs.toFixed(0)} ms)`);
  const scanned = flagged.filter((name) => !name.startsWith('count(*)'));
  log(`  ${scanned.length === 0 ? 'no monitoring or dashboard statement scans the key table' : `KEY TABLE SEQ SCANS in: ${[...new Set(scanned)].join(', ')}`}`);
  // BENCH_INDEX_COST=0 leaves out what the dashboard's two indexes cost claims (a third of the run).
  const indexCost = process.env.BENCH_INDEX_COST !== '0';
  const recentKeysIndexCost = indexCost ? await benchIndexCost(pool, database.url, log, RECENT_KEYS_INDEX) : null;
  const correlationIndexCost = indexCost ? await benchIndexCost(pool, database.url, log, CORRELATION_INDEX) : null;
  await pool.end();
  return { timings, recentKeysIndexCost, correlationIndexCost };
}

export interface DashboardIndex {
  name: string;
  create: string;
}
export const RECENT_KEYS_INDEX: DashboardIndex = {
  name: 'idempotency_keys_principal_created_idx',
  create: `CREATE INDEX idempotency_keys_principal_created_idx ON idempotency_keys (principal_id, created_at) WHERE ${PRINCIPAL_CREATED_INDEX_PREDICATE}`,
};
export const CORRELATION_INDEX: DashboardIndex = {
  name: 'idempotency_keys_correlation_idx',
  create: `CREATE INDEX idempotency_keys_correlation_idx ON idempotency_keys (correlation_id) WHERE ${CORRELATION_INDEX_PREDICATE}`,
};
const COST_CLIENTS = 8;
const COST_MS = Number(process.env.BENCH_SECONDS ?? 3) * 2000;

/** Claims of new keys into the loaded table, 8 clients, with a dashboard index and without it, two rounds each. */
export async function benchIndexCost(pool: pg.Pool, url: string, log: (line: string) => void, index: DashboardIndex): Promise<IndexCost> {
  const INDEX = index.name;
  log('');
  log(`  cost of ${INDEX} on claims (${COST_CLIENTS} clients, new keys, ${(COST_MS / 1000).toFixed(0)} s a round):`);
  const clients = await Promise.all(Array.from({ length: COST_CLIENTS }, async () => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    return client;
  }));
  const principals = clients.map(() => randomUUID());
  let round = 0;
  const run = () => {
    round += 1;
    return runClosedLoop(COST_CLIENTS, COST_MS, async (worker, i) => {
      await clients[worker]?.query({
        name: 'bench_cost_claim',
        text: storeStatementTexts.claim,
        values: [principals[worker], 'POST /api/v1/payments', `cost-${INDEX}-${round}-${worker}-${i}`, randomBytes(32), newCorrelationId(), 30_000, 93_600_000, BENCH_SERVICE],
      });
    });
  };
  const withRuns: RunResult[] = [];
  const withoutRuns: RunResult[] = [];
  try {
    for (let i = 0; i < 2; i += 1) {
      withRuns.push(await run());
      log(`  ${formatRun('  with the index', withRuns.at(-1) as RunResult)}`);
      await pool.query(`DROP INDEX ${INDEX}`);
      withoutRuns.push(await run());
      log(`  ${formatRun('  without it', withoutRuns.at(-1) as RunResult)}`);
      log('    (rebuilding the index)');
      await pool.query(index.create);
    }
  } finally {
    await Promise.all(clients.map((client) => client.end()));
  }
  const withIndex = meanRun(withRuns);
  const withoutIndex = meanRun(withoutRuns);
  const ratio = withIndex.perSecond / withoutIndex.perSecond;
  const { rows } = await pool.query<{ size: string }>(`SELECT pg_size_pretty(pg_relation_size('${INDEX}')) AS size`);
  log(`  with/without: ${ratio.toFixed(3)}x claims per second, p99 ${withIndex.p99Ms.toFixed(2)} vs ${withoutIndex.p99Ms.toFixed(2)} ms; index size ${rows[0]?.size}`);
  return { withIndex, withoutIndex, ratio };
}
