// Every monitoring and dashboard query against a 10-million-row key store: its time (median
// of 5) and its plan, beside count(*) for comparison. Target: each under 50 ms. Then the cost
// on claims of the one index only the dashboard needs (principal_id, created_at): 8 clients
// claiming new keys into the 10-million-row table, with the index and with it dropped,
// alternating rounds.
import pg from 'pg';
import { storeStatementTexts } from '@retrysafe/store/postgres';
import { readAlertInputs } from '../server/metrics/alerts';
import { overviewQuery, readOverview } from '../server/metrics/overview';
import { readBaseline } from '../server/metrics/sampler';
import { readLatestScopeFigures, sampleScopeFigures } from '../server/metrics/scope-sample';
import { readStoreFigures } from '../server/metrics/store-figures';
import { explainPrepared, recordingQueryable, summarisePlan, type PlanNode } from '../db/plan';
import { ensurePolicies } from '../server/retention/policies';
import { defaultPolicyFields } from '../server/demo/policies';
import type { BenchDatabase } from './database';
import { BENCH_SERVICE, loadCompletedKeys } from './fixtures';
import { listStaleClaims, principalKeysStatement, readKeyRecords } from '../server/idempotency/key-metadata';
import { formatRun, meanRun, runClosedLoop, type RunResult } from './measure';
import { createPool } from '../db/client';
import { EXPIRY_INDEX_PREDICATE, PRINCIPAL_CREATED_INDEX_PREDICATE } from '../db/schema/idempotency-keys';
import { randomBytes, randomUUID } from 'node:crypto';

const ROWS = Number(process.env.BENCH_STATS_ROWS ?? 10_000_000);
/** The tenant whose keys the dashboard lists: half a million of them, live. */
const LARGE_TENANT = '00000000-0000-0000-0000-00000000a46e';

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

export async function benchStatsQueries(database: BenchDatabase, log: (line: string) => void): Promise<{ timings: QueryTiming[]; recentKeysIndexCost: IndexCost }> {
  const pool = createPool(database.url, { applicationName: 'retrysafe-bench', max: 4 });
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
    INSERT INTO flow_counts_minute (minute, service, scope, outcome, count)
    SELECT date_trunc('minute', now()) - m * interval '1 minute', '${BENCH_SERVICE}', s, o, 10 + m % 7
    FROM generate_series(0, 2880) AS m, unnest(ARRAY['POST /api/v1/payments', 'POST /api/v1/refunds']) AS s,
         unnest(ARRAY['new', 'replay', 'conflict', 'mismatch', 'takeover']) AS o;
    INSERT INTO claim_latency_minute (minute, service, scope, bucket, count)
    SELECT date_trunc('minute', now()) - m * interval '1 minute', '${BENCH_SERVICE}', s, b, 3
    FROM generate_series(0, 2880) AS m, unnest(ARRAY['POST /api/v1/payments', 'POST /api/v1/refunds']) AS s, generate_series(5, 25) AS b;
    INSERT INTO flow_counts_hour (hour, service, scope, outcome, count)
    SELECT date_trunc('hour', now()) - h * interval '1 hour', '${BENCH_SERVICE}', s, 'new', 600
    FROM generate_series(49, 840) AS h, unnest(ARRAY['POST /api/v1/payments', 'POST /api/v1/refunds']) AS s;
    INSERT INTO store_stats (sampled_at, estimated_rows, baseline_rows, table_bytes, index_bytes, toast_bytes, cleanup_lag_seconds, stale_claims)
    SELECT date_trunc('minute', now()) - m * interval '1 minute', 10000000, 9000000, 0, 0, 0, 30, 0 FROM generate_series(0, 43200) AS m;
    INSERT INTO store_stats_scopes (sampled_at, service, scope, estimated_rows, response_bytes, sampled_fraction)
    SELECT date_trunc('minute', now()) - m * interval '1 minute', '${BENCH_SERVICE}', s, 5000000, 2000000000, 0.003
    FROM generate_series(0, 43200) AS m, unnest(ARRAY['POST /api/v1/payments', 'POST /api/v1/refunds']) AS s;`);
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
  /** A read of several statements: its total time, then each statement's plan on its own line. */
  const measureComposite = async (name: string, run: (db: pg.Pool) => Promise<unknown>) => {
    const recorded = recordingQueryable(pool);
    await run(recorded.db);
    await measure(name, () => run(pool), `${recorded.statements.length} statements:`);
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
  for (const range of ['1h', '24h', '30d'] as const) {
    await measureComposite(`overview ${range}`, (db) => readOverview(db, overviewQuery.parse({ range })));
  }
  const single = async (name: string, text: string, values: readonly unknown[] = []) =>
    measure(name, () => pool.query(text, [...values]), planLine(name, await explain(text, values)));
  await single('stale claims count', "SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress' AND lease_expires_at < now()");
  await single('oldest expiry', `SELECT min(expires_at) FROM idempotency_keys WHERE ${EXPIRY_INDEX_PREDICATE}`);
  const claimValues = ['00000000-0000-0000-0000-000000000001', 'POST /api/v1/payments', 'old-1', Buffer.alloc(32), '00000000-0000-0000-0000-000000000002', 30_000, 93_600_000, BENCH_SERVICE];
  await single('claim statement (for scale)', storeStatementTexts.claim, claimValues);
  // The dashboard's reads of the key table (through the same statements the pages use).
  const tenant = LARGE_TENANT;
  await measureComposite('dashboard: key lookup', (db) => readKeyRecords(db, tenant, 'large-1'));
  for (const [name, filter] of [
    ['dashboard: recent keys, newest 50', {}],
    ['dashboard: recent keys, rare state', { state: 'failed' }],
    ['dashboard: recent keys, absent state', { state: 'in_progress' }],
    ['dashboard: recent keys, 10 h back', { after: { createdAtMicros: String((Date.now() - 36_000_000) * 1000), service: BENCH_SERVICE, scope: 'POST /api/v1/payments', key: 'large-1' } }],
  ] as const) {
    await measureComposite(name, (db) => db.query(principalKeysStatement({ principalId: tenant, reason: 'bench', limit: 50, ...filter })));
  }
  await measureComposite('dashboard: stale claims', (db) => listStaleClaims(db, 100));
  await single('count(*), for comparison', 'SELECT count(*) FROM idempotency_keys');
  const slow = timings.filter((timing) => !timing.name.startsWith('count(*)') && timing.medianMs >= 50);
  log(`  ${slow.length === 0 ? 'every monitoring and dashboard query under 50 ms' : `OVER 50 ms: ${slow.map((timing) => timing.name).join(', ')}`} (count(*) ${timings.at(-1)?.medianMs.toFixed(0)} ms)`);
  const scanned = flagged.filter((name) => !name.startsWith('count(*)'));
  log(`  ${scanned.length === 0 ? 'no monitoring or dashboard statement scans the key table' : `KEY TABLE SEQ SCANS in: ${[...new Set(scanned)].join(', ')}`}`);
  const recentKeysIndexCost = await benchRecentKeysIndex(pool, database.url, log);
  await pool.end();
  return { timings, recentKeysIndexCost };
}

const INDEX = 'idempotency_keys_principal_created_idx';
const COST_CLIENTS = 8;
const COST_MS = Number(process.env.BENCH_SECONDS ?? 3) * 2000;

/** Claims of new keys into the loaded table, 8 clients, with the recent-keys index and without it, two rounds each. */
async function benchRecentKeysIndex(pool: pg.Pool, url: string, log: (line: string) => void): Promise<IndexCost> {
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
        values: [principals[worker], 'POST /api/v1/payments', `cost-${round}-${worker}-${i}`, randomBytes(32), randomUUID(), 30_000, 93_600_000, BENCH_SERVICE],
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
      await pool.query(`CREATE INDEX ${INDEX} ON idempotency_keys (principal_id, created_at) WHERE ${PRINCIPAL_CREATED_INDEX_PREDICATE}`);
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
