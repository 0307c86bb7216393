// The dashboard's overview for a time range: flow rates per second and as a share of
// claims, claim latency percentiles from the merged histograms, the store series against
// its baseline, the last sweep and the current alerts. Aggregates only: no key, response
// body or fingerprint is read. The flow and latency series read the pre-aggregated series of the
// range's step (migration 0021), one primary-key range each, whatever the number of scopes.
import { z } from 'zod';
import { storableText } from '../storable';
import { serviceNameSchema } from '../service-name';
import { ALL, claimOutcomes, SERIES_STEPS, type ClaimOutcome } from '@retrysafe/store';
import type { Queryable } from '@retrysafe/store/postgres';
import { alertThresholds, evaluateAlerts, readAlertInputs, type Alert, type AlertThresholds } from './alerts';
import { evaluateChecks, type Check } from './checks';
import { BUCKET_COUNT, percentileOf } from '@retrysafe/store';
import { readLatestScopeFigures } from './scope-sample';
import type { StoreFigures } from './store-figures';
import { readLastFinishedSweep, type FinishedSweep } from '../retention/review';
import { principalsErrorBound, readPrincipalsRanked, troubleOutcomes, type PrincipalsBehind } from './principals';
import { readTogether } from './read-together';

export const overviewRanges = { '1h': 3_600, '6h': 21_600, '24h': 86_400, '7d': 604_800, '30d': 2_592_000 } as const;
export type OverviewRange = keyof typeof overviewRanges;

/** Step per range (seconds), so a chart has 60 to 170 points: each one of the series' steps (SERIES_STEPS). */
export const overviewSteps: Record<OverviewRange, (typeof SERIES_STEPS)[number]> = { '1h': 60, '6h': 300, '24h': 900, '7d': 3_600, '30d': 21_600 };
const steps = overviewSteps;

export const overviewQuery = z.strictObject({
  range: z.enum(['1h', '6h', '24h', '7d', '30d']).default('1h'),
  service: serviceNameSchema.optional(),
  // '*' names the series merged over every scope, never a scope.
  scope: storableText().min(1).max(200).refine((scope) => scope !== ALL, "'*' is not a scope").optional(),
});
export type OverviewQuery = z.infer<typeof overviewQuery>;

export interface FlowPoint {
  t: string;
  claims: number;
  counts: Record<ClaimOutcome, number>;
  perSecond: Record<ClaimOutcome, number>;
  /** Share of claims, 0..1 (0 when there were none). */
  share: Record<ClaimOutcome, number>;
  p50Ms: number | null;
  p95Ms: number | null;
  p99Ms: number | null;
  /** Seconds of the step that have passed: the step itself, or less for the current, unfinished one. */
  seconds: number;
}

/** One store_stats sample: the store's figures, named for the chart, against its baseline. */
// The stored series (store_stats) keeps the stale-claim count, not the oldest one's age.
export interface StorePoint extends Omit<StoreFigures, 'estimatedRows' | 'oldestStaleSeconds'> {
  t: string;
  rows: number;
  baseline: number;
  ratio: number | null;
}

export interface Overview {
  range: OverviewRange;
  stepSeconds: number;
  from: string;
  to: string;
  /** The service chosen (null: every service). */
  service: string | null;
  /** The services with claims in the range. */
  services: string[];
  scope: string | null;
  /** The scopes with claims in the range (of the chosen service, or of every service). */
  scopes: string[];
  flow: FlowPoint[];
  store: StorePoint[];
  /** Each scope's estimated rows and stored response bytes, from the last sample in the range (null: none yet). */
  storeByScope: { sampledAt: string; scopes: { service: string; scope: string; estimatedRows: number; responseBytes: number }[] } | null;
  /** The last finished sweep run (readLastFinishedSweep). */
  lastSweep: (Omit<FinishedSweep, 'finishedAt'> & { finishedAt: string }) | null;
  alerts: Alert[];
  /** The principals behind conflicts, mismatches, rejections and stale claims (readPrincipalsBehind). */
  principals: PrincipalsBehind;
  /** Every alert rule as a check for this choice: the firing ones first, then the passed ones with their values. */
  checks: Check[];
  /** The thresholds the charts draw as lines. */
  objectives: { claimP99Ms: number; conflictShare: number; mismatchShare: number; rowsOverBaselineRatio: number };
  /** When the first flow bucket still kept was recorded (null: none): the charts leave the time before it empty. */
  dataSince: string | null;
  /** The server's clock when read: the last step is unfinished up to it. */
  now: string;
  /** Stale claims now (in progress past their lease) of the chosen service and scope. */
  staleClaims: { count: number; oldestPastLeaseSeconds: number | null };
}

/** The overview as it travels as JSON (dates as ISO strings). */
export type OverviewJson = Omit<Overview, 'alerts' | 'checks'> & { alerts: (Omit<Alert, 'since'> & { since: string | null })[]; checks: (Omit<Check, 'since'> & { since: string | null })[] };

const zeroes = (): Record<ClaimOutcome, number> => Object.fromEntries(claimOutcomes.map((outcome) => [outcome, 0])) as Record<ClaimOutcome, number>;
const finite = (value: number) => (Number.isFinite(value) ? value : null);

/** A read started on its first call and shared by every later one. */
function once<T>(read: () => Promise<T>): () => Promise<T> {
  let started: Promise<T> | undefined;
  return () => (started ??= read());
}

/** `sweepIntervalSeconds`: the server's SWEEP_INTERVAL_SECONDS, for the stalled-sweeper alert. */
export async function readOverview(db: Queryable, query: OverviewQuery, thresholds: AlertThresholds = alertThresholds, sweepIntervalSeconds?: number): Promise<Overview> {
  const rangeSeconds = overviewRanges[query.range];
  const step = steps[query.range];
  const { rows: clock } = await db.query<{ to: Date; from: Date; now: Date }>(
    `SELECT now() AS now, date_bin($1::int * interval '1 second', now(), 'epoch') + $1::int * interval '1 second' AS to,
            date_bin($1::int * interval '1 second', now(), 'epoch') + $1::int * interval '1 second' - $2::int * interval '1 second' AS from`,
    [step, rangeSeconds],
  );
  const window = clock[0];
  if (!window) throw new Error('no clock');
  // The series pre-aggregated at flush for this range's step (migration 0021): one row per step
  // and outcome (or latency bucket) of one (service, scope) level: the store's ('*', '*'), a
  // service's (service, '*'), or a scope's (one row per service that has it). Each is a range of
  // the series' primary key (step, service, scope, at), so the rows read are bounded by the
  // range's steps, not by the number of scopes; they include the current minute's last flush.
  // The range's (service, scope) pairs are read once, for the series and the principals, which
  // wait for them only when a scope is chosen without its service (its level is each service's).
  const range = { step, from: window.from, to: window.to, service: query.service, scope: query.scope };
  const scopesOfRange = once(() => readSeriesScopes(db, step, window.from, window.to));
  const lastFinishedSweep = once(() => readLastFinishedSweep(db));
  const principalsOfRange = async () => {
    const services = query.service === undefined && query.scope !== undefined ? [...new Set((await scopesOfRange()).map((row) => row.service))] : [];
    return readPrincipalsRanked(db, { from: window.from, to: window.to, service: query.service ?? null, scope: query.scope ?? null, services });
  };
  type Sample = {
    t: Date;
    estimated_rows: string;
    baseline_rows: string;
    table_bytes: string;
    index_bytes: string;
    toast_bytes: string;
    oldest_row_age_seconds: number | null;
    cleanup_lag_seconds: number;
    stale_claims: number;
  };
  // Independent reads, at once on a pool (readTogether), each named (prepared once per
  // connection; the plan tests cover their generic plans): the answer takes about as long as the
  // slowest chain (the alert inputs, or the series and then the principals), not their sum.
  const [{ scopes, counts, latency }, ranked, samples, lastSweep, since, stale, alertInputs, scopeFigures] = await readTogether(db, [
    () => readOverviewSeries(db, range, scopesOfRange),
    principalsOfRange,
    // The last sample of each step: one backward primary-key probe per step, so a 30-day range
    // reads 120 samples rather than 43,000.
    () =>
      db.query<Sample>({
        name: 'dashboard_overview_store_samples',
        text: `SELECT g.t, s.estimated_rows, s.baseline_rows, s.table_bytes, s.index_bytes, s.toast_bytes,
                      s.oldest_row_age_seconds, s.cleanup_lag_seconds, s.stale_claims
               FROM generate_series($2::timestamptz, $3::timestamptz - $1::int * interval '1 second', $1::int * interval '1 second') AS g(t)
               CROSS JOIN LATERAL (
                 SELECT * FROM store_stats WHERE sampled_at >= g.t AND sampled_at < g.t + $1::int * interval '1 second'
                 ORDER BY sampled_at DESC LIMIT 1
               ) s ORDER BY g.t`,
        values: [step, window.from, window.to],
      }),
    lastFinishedSweep,
    // The earliest bucket still kept: a primary-key probe at each table's start.
    () =>
      db.query<{ since: Date | null }>({
        name: 'dashboard_overview_since',
        text: 'SELECT least((SELECT min(hour) FROM flow_counts_hour), (SELECT min(minute) FROM flow_counts_minute)) AS since',
      }),
    // Stale claims of the choice, through the partial index idempotency_keys_stale_lease_idx.
    () =>
      db.query<{ n: number; oldest: number | null }>({
        name: 'dashboard_overview_stale',
        text: `SELECT count(*)::int AS n, extract(epoch FROM now() - min(lease_expires_at))::float8 AS oldest FROM idempotency_keys
               WHERE state = 'in_progress' AND lease_expires_at < now() AND ($1::text IS NULL OR service = $1) AND ($2::text IS NULL OR scope = $2)`,
        values: [query.service ?? null, query.scope ?? null],
      }),
    () => readAlertInputs(db, { sweepIntervalSeconds, thresholds, checksFor: { service: query.service, scope: query.scope }, now: window.now, lastSweep: lastFinishedSweep }),
    () => readLatestScopeFigures(db, window.to),
  ]);
  // The principals' error bound is from the range's events in the selection (its series).
  const totals = { claims: 0, conflict: 0, mismatch: 0, rejected: 0, takeover: 0, error: 0 };
  for (const row of counts) {
    totals.claims += Number(row.n);
    if ((troubleOutcomes as readonly string[]).includes(row.outcome)) totals[row.outcome as keyof typeof totals] += Number(row.n);
  }
  const principals: PrincipalsBehind = { ...ranked, errorBound: principalsErrorBound(totals, ranked.k) };
  const services = [...new Set(scopes.map((row) => row.service))];
  // A chosen service or scope shows its own flow alerts and the store-wide ones; none shows them all.
  const alerts = evaluateAlerts(alertInputs, thresholds).filter(
    (alert) => alert.storeWide || ((query.service === undefined || alert.service === query.service) && (query.scope === undefined || alert.scope === query.scope)),
  );

  const flow = new Map<number, { counts: Record<ClaimOutcome, number>; latency: number[] }>();
  for (let t = window.from.getTime(); t < window.to.getTime(); t += step * 1000) flow.set(t, { counts: zeroes(), latency: new Array<number>(BUCKET_COUNT).fill(0) });
  for (const row of counts) {
    const point = flow.get(row.t.getTime());
    if (point) point.counts[row.outcome] += Number(row.n);
  }
  for (const row of latency) {
    const point = flow.get(row.t.getTime());
    if (point) row.buckets.forEach((bucket, i) => (point.latency[bucket] = (point.latency[bucket] ?? 0) + (row.counts[i] ?? 0)));
  }
  const scopeSample = scopeFigures.filter((figure) => figure.sampledAt >= window.from);
  return {
    range: query.range,
    stepSeconds: step,
    from: window.from.toISOString(),
    to: window.to.toISOString(),
    service: query.service ?? null,
    services,
    scope: query.scope ?? null,
    scopes: [...new Set(scopes.filter((row) => query.service === undefined || row.service === query.service).map((row) => row.scope))].sort(),
    flow: [...flow.entries()].map(([t, point]) => {
      const claims = claimOutcomes.reduce((sum, outcome) => sum + point.counts[outcome], 0);
      const perSecond = zeroes();
      const share = zeroes();
      // The current step has run only since its start: its rate is over that, not the whole step.
      const seconds = Math.max(1, Math.min(step, (window.now.getTime() - t) / 1000));
      for (const outcome of claimOutcomes) {
        perSecond[outcome] = point.counts[outcome] / seconds;
        share[outcome] = claims > 0 ? point.counts[outcome] / claims : 0;
      }
      return {
        t: new Date(t).toISOString(),
        claims,
        counts: point.counts,
        perSecond,
        share,
        p50Ms: finite(percentileOf(point.latency, 50)),
        p95Ms: finite(percentileOf(point.latency, 95)),
        p99Ms: finite(percentileOf(point.latency, 99)),
        seconds,
      };
    }),
    store: samples.rows.map((row) => {
      const rows = Number(row.estimated_rows);
      const baseline = Number(row.baseline_rows);
      return {
        t: row.t.toISOString(),
        rows,
        baseline,
        ratio: baseline > 0 ? rows / baseline : null,
        tableBytes: Number(row.table_bytes),
        indexBytes: Number(row.index_bytes),
        toastBytes: Number(row.toast_bytes),
        oldestRowAgeSeconds: row.oldest_row_age_seconds,
        cleanupLagSeconds: row.cleanup_lag_seconds,
        staleClaims: row.stale_claims,
      };
    }),
    storeByScope:
      scopeSample[0] === undefined
        ? null
        : {
            sampledAt: scopeSample[0].sampledAt.toISOString(),
            scopes: scopeSample
              .filter((figure) => (query.scope === undefined || figure.scope === query.scope) && (query.service === undefined || figure.service === query.service))
              .map(({ service, scope, estimatedRows, responseBytes }) => ({ service, scope, estimatedRows, responseBytes })),
          },
    lastSweep: lastSweep ? { ...lastSweep, finishedAt: lastSweep.finishedAt.toISOString() } : null,
    alerts,
    checks: evaluateChecks(alertInputs, alerts, thresholds, { service: query.service, scope: query.scope }),
    objectives: {
      claimP99Ms: thresholds.claimP99ObjectiveMs,
      conflictShare: thresholds.conflictShare,
      mismatchShare: thresholds.mismatchShare,
      rowsOverBaselineRatio: thresholds.rowsOverBaselineRatio,
    },
    dataSince: since.rows[0]?.since?.toISOString() ?? null,
    now: window.now.toISOString(),
    staleClaims: { count: stale.rows[0]?.n ?? 0, oldestPastLeaseSeconds: stale.rows[0]?.oldest ?? null },
    principals,
  };
}

/**
 * The (service, scope) pairs with flow in [from, to) at this step, never the merged '*' rows:
 * a skip scan of the series' primary key (one index descent per pair kept at the step, however
 * many rows each has), each pair kept when a probe of its key finds a row in the range.
 */
async function readSeriesScopes(db: Queryable, step: number, from: Date, to: Date): Promise<SeriesPair[]> {
  const { rows } = await db.query<SeriesPair>({
    name: 'dashboard_overview_series_scopes',
    text: `WITH RECURSIVE pairs AS (
             (SELECT service, scope FROM flow_counts_series WHERE step = $1 ORDER BY service, scope LIMIT 1)
             UNION ALL
             SELECT next.service, next.scope FROM pairs CROSS JOIN LATERAL (
               SELECT service, scope FROM flow_counts_series WHERE step = $1 AND (service, scope) > (pairs.service, pairs.scope)
               ORDER BY service, scope LIMIT 1
             ) AS next
           )
           SELECT service, scope FROM pairs
           WHERE service <> '${ALL}' AND scope <> '${ALL}'
             -- A probe per pair (a scalar subquery, never turned into a join over the range's rows).
             AND (SELECT true FROM flow_counts_series f WHERE f.step = $1 AND f.service = pairs.service AND f.scope = pairs.scope AND f.at >= $2 AND f.at < $3 LIMIT 1)
           ORDER BY service, scope`,
    values: [step, from, to],
  });
  return rows;
}

type SeriesPair = { service: string; scope: string };

/**
 * The flow and latency series of one range (its step, from, to) and the (service, scope) pairs
 * with flow in it: three statements, each a range of a series table's primary key, at once on a
 * pool (the series wait for the pairs only when a scope is chosen without its service).
 * `scopesOfRange` reads the pairs (readSeriesScopes) once for a caller that needs them too.
 */
export async function readOverviewSeries(
  db: Queryable,
  range: { step: number; from: Date; to: Date; service?: string | undefined; scope?: string | undefined },
  scopesOfRange: () => Promise<SeriesPair[]> = () => readSeriesScopes(db, range.step, range.from, range.to),
): Promise<{ scopes: SeriesPair[]; counts: { t: Date; outcome: ClaimOutcome; n: string }[]; latency: { t: Date; buckets: number[]; counts: number[] }[] }> {
  const scopes = scopesOfRange();
  // The level: the store's ('*', '*'), a service's (service, '*'), or a scope's in each service that has it.
  const levelServices =
    range.service !== undefined ? [range.service] : range.scope !== undefined ? [...new Set((await scopes).filter((row) => row.scope === range.scope).map((row) => row.service))] : [ALL];
  const params = [range.step, range.from, range.to, levelServices, range.scope ?? ALL];
  const [pairs, counts, latency] = await readTogether(db, [
    () => scopes,
    () =>
      db.query<{ t: Date; outcome: ClaimOutcome; n: string }>({
        name: 'dashboard_overview_flow_series',
        text: `SELECT at AS t, outcome, sum(count) AS n FROM flow_counts_series
               WHERE step = $1 AND service = ANY($4::text[]) AND scope = $5 AND at >= $2 AND at < $3 GROUP BY 1, 2`,
        values: params,
      }),
    // Each step's histogram as two JSON arrays (buckets, counts): a row per step rather than per
    // bucket, parsed natively by the client.
    () =>
      db.query<{ t: Date; buckets: number[]; counts: number[] }>({
        name: 'dashboard_overview_latency_series',
        text: `SELECT t, json_agg(bucket) AS buckets, json_agg(n) AS counts FROM (
                 SELECT at AS t, bucket, sum(count) AS n FROM claim_latency_series
                 WHERE step = $1 AND service = ANY($4::text[]) AND scope = $5 AND at >= $2 AND at < $3 GROUP BY 1, 2
               ) AS cells GROUP BY t`,
        values: params,
      }),
  ]);
  return { scopes: pairs, counts: counts.rows, latency: latency.rows };
}
