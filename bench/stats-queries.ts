// Every monitoring query against a 10-million-row key store: its time (median of 5) and its
// plan, beside count(*) for comparison. Target: each under 50 ms.
import pg from 'pg';
import { storeStatementTexts } from '../server/idempotency/statements';
import { readAlertInputs } from '../server/metrics/alerts';
import { overviewQuery, readOverview } from '../server/metrics/overview';
import { readBaseline } from '../server/metrics/sampler';
import { readStoreFigures } from '../server/metrics/store-figures';
import { ensurePolicies } from '../server/retention/policies';
import { defaultPolicyFields } from '../server/demo/policies';
import type { BenchDatabase } from './database';
import { loadExpiredKeys } from './fixtures';

const ROWS = Number(process.env.BENCH_STATS_ROWS ?? 10_000_000);

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

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  Plans?: PlanNode[];
}

function summarise(plan: PlanNode): string {
  const parts: string[] = [];
  const walk = (node: PlanNode) => {
    if (node['Relation Name'] || node['Index Name']) parts.push(`${node['Node Type']}${node['Index Name'] ? ` ${node['Index Name']}` : ` ${node['Relation Name'] ?? ''}`}`);
    for (const child of node.Plans ?? []) walk(child);
  };
  walk(plan);
  return [...new Set(parts)].join('; ') || plan['Node Type'];
}

export async function benchStatsQueries(database: BenchDatabase, log: (line: string) => void): Promise<QueryTiming[]> {
  const pool = new pg.Pool({ connectionString: database.url, max: 4 });
  await ensurePolicies(pool, defaultPolicyFields, 'bench');
  log(`loading ${ROWS.toLocaleString('en')} keys and two days of metrics...`);
  const started = performance.now();
  const { rows: clock } = await pool.query<{ from: Date }>("SELECT now() - interval '2 hours' AS from");
  await loadExpiredKeys(pool, ROWS, clock[0]?.from ?? new Date());
  await pool.query(`
    INSERT INTO idempotency_keys (principal_id, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
    SELECT gen_random_uuid(), 'POST /api/v1/refunds', 'running-' || i, 'in_progress', sha256(i::text::bytea), gen_random_uuid(),
           now() + (i % 120 - 60) * interval '1 second', now() + interval '1 day'
    FROM generate_series(1, 5000) AS i;
    INSERT INTO flow_counts_minute (minute, scope, outcome, count)
    SELECT date_trunc('minute', now()) - m * interval '1 minute', s, o, 10 + m % 7
    FROM generate_series(0, 2880) AS m, unnest(ARRAY['POST /api/v1/payments', 'POST /api/v1/refunds']) AS s,
         unnest(ARRAY['new', 'replay', 'conflict', 'mismatch', 'takeover']) AS o;
    INSERT INTO claim_latency_minute (minute, scope, bucket, count)
    SELECT date_trunc('minute', now()) - m * interval '1 minute', s, b, 3
    FROM generate_series(0, 2880) AS m, unnest(ARRAY['POST /api/v1/payments', 'POST /api/v1/refunds']) AS s, generate_series(5, 25) AS b;
    INSERT INTO flow_counts_hour (hour, scope, outcome, count)
    SELECT date_trunc('hour', now()) - h * interval '1 hour', s, 'new', 600
    FROM generate_series(49, 840) AS h, unnest(ARRAY['POST /api/v1/payments', 'POST /api/v1/refunds']) AS s;
    INSERT INTO store_stats (sampled_at, estimated_rows, baseline_rows, table_bytes, index_bytes, toast_bytes, cleanup_lag_seconds, stale_claims)
    SELECT date_trunc('minute', now()) - m * interval '1 minute', 10000000, 9000000, 0, 0, 0, 30, 0 FROM generate_series(0, 43200) AS m;`);
  await pool.query('VACUUM ANALYZE');
  log(`  loaded in ${((performance.now() - started) / 1000).toFixed(0)} s`);

  const explain = async (text: string, values: unknown[] = []) => {
    const client = await pool.connect();
    try {
      await client.query(`PREPARE bench_q AS ${text}`);
      const literals = values.map((value) => (typeof value === 'number' ? String(value) : client.escapeLiteral(String(value))));
      const { rows } = await client.query<{ 'QUERY PLAN': { Plan: PlanNode }[] }>(
        `EXPLAIN (FORMAT JSON) EXECUTE bench_q${literals.length > 0 ? `(${literals.join(', ')})` : ''}`,
      );
      await client.query('DEALLOCATE bench_q');
      const plan = rows[0]?.['QUERY PLAN'][0]?.Plan;
      return plan ? summarise(plan) : '?';
    } finally {
      client.release();
    }
  };

  const timings: QueryTiming[] = [];
  const measure = async (name: string, run: () => Promise<unknown>, plan: string) => {
    const medianMs = await median(run);
    timings.push({ name, medianMs, plan });
    log(`  ${name.padEnd(34)} ${medianMs.toFixed(2).padStart(9)} ms   ${plan}`);
  };

  log('');
  await measure('store figures (catalog + indexes)', () => readStoreFigures(pool), 'composite: catalog rows, one expires_at index probe, the stale-claim count below');
  await measure('baseline (flow buckets)', () => readBaseline(pool), 'composite: sums over the flow minute and hour tables (time ranges)');
  await measure('alert inputs (30 min)', () => readAlertInputs(pool), 'composite: 30 minutes of store_stats, flow and latency buckets');
  for (const range of ['1h', '24h', '30d'] as const) {
    await measure(`overview ${range}`, () => readOverview(pool, overviewQuery.parse({ range })), 'composite: flow, latency and store_stats over the range');
  }
  await measure('stale claims count', () => pool.query("SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress' AND lease_expires_at < now()"),
    await explain("SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress' AND lease_expires_at < now()"));
  await measure('oldest expiry', () => pool.query('SELECT min(expires_at) FROM idempotency_keys'), await explain('SELECT min(expires_at) FROM idempotency_keys'));
  await measure('claim statement (for scale)', () => pool.query({ name: 'bench_stats_claim', text: storeStatementTexts.claim, values: ['00000000-0000-0000-0000-000000000001', 'POST /api/v1/payments', 'old-1', Buffer.alloc(32), '00000000-0000-0000-0000-000000000002', 30_000, 93_600_000] }), await explain(storeStatementTexts.claim, ['00000000-0000-0000-0000-000000000001', 'POST /api/v1/payments', 'old-1', '\\x' + '00'.repeat(32), '00000000-0000-0000-0000-000000000002', 30_000, 93_600_000]));
  await measure('count(*), for comparison', () => pool.query('SELECT count(*) FROM idempotency_keys'), await explain('SELECT count(*) FROM idempotency_keys'));
  const slow = timings.filter((timing) => !timing.name.startsWith('count(*)') && timing.medianMs >= 50);
  log(`  ${slow.length === 0 ? 'every monitoring query under 50 ms' : `OVER 50 ms: ${slow.map((timing) => timing.name).join(', ')}`} (count(*) ${timings.at(-1)?.medianMs.toFixed(0)} ms)`);
  await pool.end();
  return timings;
}
