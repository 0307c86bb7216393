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
import { alertThresholds, evaluateAlertStates, readAlertInputs, type Alert, type AlertThresholds } from './alerts';
import { evaluateChecks, type Check } from './checks';
import { BUCKET_COUNT, percentileOf } from '@retrysafe/store';
import { readLatestScopeFigures } from './scope-sample';
import type { StoreFigures } from './store-figures';
import { readLastFinishedSweep, type FinishedSweep } from '../retention/review';
import { principalsErrorBound, readPrincipalsRanked, troubleOutcomes, type PrincipalsBehind } from './principals';
import { readTogether } from './read-together';
import type { ReplicaLag } from './replica-lag';
import { readCapacity, type Capacity } from './capacity';
import { durationText, isRecordedOpen, readAlertHistory, type AlertFiring } from './alert-history';
import { readInstanceStarts } from '../instance-starts';
import { readStoreElsewhere, type StoreElsewhere, type StoreFiguresSource } from './store-elsewhere';
import type { StaleElsewhereReader } from './stale-elsewhere';
import { readKeptElsewhereSeries, type KeptElsewherePoint } from './kept-elsewhere-samples';

export const overviewRanges = { '1h': 3_600, '6h': 21_600, '24h': 86_400, '7d': 604_800, '30d': 2_592_000 } as const;
export type OverviewRange = keyof typeof overviewRanges;

/** Step per range (seconds), so a chart has 60 to 170 points: each one of the series' steps (SERIES_STEPS). */
export const overviewSteps: Record<OverviewRange, (typeof SERIES_STEPS)[number]> = { '1h': 60, '6h': 300, '24h': 900, '7d': 3_600, '30d': 21_600 };
const steps = overviewSteps;

/** The longest absolute window (from/to) the overview shows: its longest range. */
export const OVERVIEW_MAX_WINDOW_SECONDS = overviewRanges['30d'];

const isoTime = z.iso.datetime({ offset: true, error: 'must be an ISO 8601 time with a zone, e.g. 2026-12-06T01:00:00Z' });

/**
 * `from`/`to`: an absolute window (a shared link reproduces what was seen), taking the place of
 * `range`; both or neither, from before to, at most the longest range apart.
 */
export const overviewQuery = z
  .strictObject({
    range: z.enum(['1h', '6h', '24h', '7d', '30d']).default('1h'),
    service: serviceNameSchema.optional(),
    // '*' names the series merged over every scope, never a scope.
    scope: storableText().min(1).max(200).refine((scope) => scope !== ALL, "'*' is not a scope").optional(),
    from: isoTime.optional(),
    to: isoTime.optional(),
    // The same series a day or a week earlier, drawn beside the flow (compare.flow).
    compare: z.enum(['1d', '7d'], { error: "must be '1d' or '7d'" }).optional(),
  })
  .superRefine((query, ctx) => {
    if (query.from === undefined && query.to === undefined) return;
    if (query.from === undefined || query.to === undefined) {
      ctx.addIssue({ code: 'custom', path: [query.from === undefined ? 'from' : 'to'], message: 'from and to go together: give both, or range alone' });
      return;
    }
    const span = (Date.parse(query.to) - Date.parse(query.from)) / 1000;
    // (A time the field's own check refused is said there, once.)
    if (Number.isNaN(span)) return;
    if (!(span > 0)) ctx.addIssue({ code: 'custom', path: ['to'], message: 'must be after from' });
    else if (span > OVERVIEW_MAX_WINDOW_SECONDS) ctx.addIssue({ code: 'custom', path: ['to'], message: `must be at most ${OVERVIEW_MAX_WINDOW_SECONDS / 86_400} days after from` });
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

/** The earlier window compare=1d|7d shows beside the flow: the offset in seconds. */
export const compareOffsets = { '1d': 86_400, '7d': 604_800 } as const;

/** At most this many events of each source in a window (the newest). */
export const EVENTS_PER_KIND = 200;

/**
 * A moment the charts mark: a policy created or changed (endpoint_policy_history), an alert's
 * start (`alert`) and end (`alert_end`) as the alert history recorded them
 * (retrysafe_server.alert_history), or, for an alert firing now that it has not recorded yet,
 * its start as evaluated now, a failed sweep run (sweep_runs), a Retrysafe server instance's
 * start with its @retrysafe/store version (`instance_start`, retrysafe.service_starts: a service's
 * instance, this server's included).
 */
export const overviewEventKinds = ['policy', 'alert', 'alert_end', 'sweep_failed', 'instance_start'] as const;

export interface OverviewEvent {
  at: string;
  kind: (typeof overviewEventKinds)[number];
  text: string;
  service?: string;
  scope?: string;
}

/** A store_stats row's figures as node-postgres returns them (bigints as text); the overview and the store export read them. */
export interface StoreSampleRow {
  estimated_rows: string;
  baseline_rows: string;
  table_bytes: string;
  index_bytes: string;
  toast_bytes: string;
  oldest_row_age_seconds: number | null;
  cleanup_lag_seconds: number;
  stale_claims: number;
}

export interface Overview {
  /** The range asked for, or for an absolute window the shortest range as long, whose step it is read at. */
  range: OverviewRange;
  /** Whether from/to were asked for (an absolute window) rather than a range ending now. */
  absolute: boolean;
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
  /** With compare=1d|7d: the flow of the window that many seconds earlier, point for point (as long as flow). */
  compare?: { offsetSeconds: number; flow: FlowPoint[] };
  /** What happened in the window (newest first, at most EVENTS_PER_KIND of each kind). */
  events: OverviewEvent[];
  store: StorePoint[];
  /** Each scope's estimated rows and stored response bytes, from the last sample in the range (null: none yet). */
  storeByScope: { sampledAt: string; scopes: { service: string; scope: string; estimatedRows: number; responseBytes: number }[] } | null;
  /** The last finished sweep run (readLastFinishedSweep). */
  lastSweep: (Omit<FinishedSweep, 'finishedAt'> & { finishedAt: string }) | null;
  alerts: Alert[];
  /** The principals behind conflicts, mismatches, rejections and stale claims (readPrincipalsBehind). */
  principals: PrincipalsBehind;
  /** Every alert rule as a check for this choice, with its state: the firing ones first, then the pending ones, then the passed ones, each with its value. */
  checks: Check[];
  /** The thresholds the charts draw as lines. */
  objectives: { claimP99Ms: number; conflictShare: number; mismatchShare: number; rowsOverBaselineRatio: number };
  /** When the first flow bucket still kept was recorded (null: none): the charts leave the time before it empty. */
  dataSince: string | null;
  /** The server's clock when read: the last step is unfinished up to it. */
  now: string;
  /** Stale claims now (in progress past their lease) of the chosen service and scope. */
  staleClaims: { count: number; oldestPastLeaseSeconds: number | null };
  /**
   * The standby the dashboard reads (DASHBOARD_READ_URL), measured now (replica-lag.ts: 0 s when
   * it has replayed all the primary had written, else the time since its last replayed commit),
   * with the replica_lag alert's threshold; null when the dashboard reads the primary.
   */
  replica: (Omit<ReplicaLag, 'measuredAt'> & { measuredAt: string; thresholdSeconds: number }) | null;
  /**
   * The key table's heap and unique index against the database's memory, the measured bytes per
   * key, and the steady state the chosen service's current new-key rate leads to (capacity.ts).
   * Catalog and metrics-table figures only: no key, fingerprint or body.
   */
  capacity: Capacity & { thresholdShare: number };
  /**
   * When the chosen service keeps its key records in Redis or MySQL: that backend's keys (or rows)
   * and memory (or table size) now against its baseline (store-elsewhere.ts); null otherwise. The
   * store-wide figures above are Postgres's and do not count its keys.
   */
  storeElsewhere: StoreElsewhere | null;
  /**
   * The same service's backend over the range, from the sampler's minute samples
   * (kept-elsewhere-samples.ts): the last sample of each step. Null when the chosen service is not kept elsewhere.
   */
  storeElsewhereSeries: KeptElsewherePoint[] | null;
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

/**
 * `sweepIntervalSeconds`: the server's SWEEP_INTERVAL_SECONDS, for the stalled-sweeper alert;
 * `replicaLag`: the standby's lag when `db` is a standby's (server/dashboard-pools.ts).
 */
export async function readOverview(
  db: Queryable,
  query: OverviewQuery,
  thresholds: AlertThresholds = alertThresholds,
  sweepIntervalSeconds?: number,
  options: {
    replicaLag?: (() => Promise<ReplicaLag>) | undefined;
    databaseMemoryBytes?: number | undefined;
    /** The services whose keys are kept in Redis or MySQL, with their backends' figures (KeyAccess.storeFigures). */
    storeFigures?: ReadonlyMap<string, StoreFiguresSource> | undefined;
    /** The same services' stale claims for the Stale claims check and its alert (KeyAccess.staleElsewhere). */
    staleElsewhere?: StaleElsewhereReader | undefined;
  } = {},
): Promise<Overview> {
  const absolute = query.from !== undefined && query.to !== undefined ? { from: new Date(query.from), to: new Date(query.to) } : null;
  const readRange = absolute ? rangeForWindow(absolute.from, absolute.to) : query.range;
  const rangeSeconds = overviewRanges[readRange];
  const step = steps[readRange];
  // A range ends at the end of the current step; an absolute window is widened to whole steps.
  const { rows: clock } = await db.query<{ to: Date; from: Date; now: Date }>(
    absolute
      ? {
          text: `SELECT now() AS now, date_bin($1::int * interval '1 second', $2::timestamptz, 'epoch') AS from,
                        date_bin($1::int * interval '1 second', $3::timestamptz - interval '1 microsecond', 'epoch') + $1::int * interval '1 second' AS to`,
          values: [step, absolute.from, absolute.to],
        }
      : {
          text: `SELECT now() AS now, date_bin($1::int * interval '1 second', now(), 'epoch') + $1::int * interval '1 second' AS to,
                        date_bin($1::int * interval '1 second', now(), 'epoch') + $1::int * interval '1 second' - $2::int * interval '1 second' AS from`,
          values: [step, rangeSeconds],
        },
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
  const replicaLag = options.replicaLag === undefined ? undefined : once(options.replicaLag);
  const principalsOfRange = async () => {
    const services = query.service === undefined && query.scope !== undefined ? [...new Set((await scopesOfRange()).map((row) => row.service))] : [];
    return readPrincipalsRanked(db, { from: window.from, to: window.to, service: query.service ?? null, scope: query.scope ?? null, services });
  };
  type Sample = StoreSampleRow & { t: Date };
  // Independent reads, at once on a pool (readTogether), each named (prepared once per
  // connection; the plan tests cover their generic plans): the answer takes about as long as the
  // slowest chain (the alert inputs, or the series and then the principals), not their sum.
  const compareOffset = query.compare === undefined ? null : compareOffsets[query.compare];
  // The chosen service's keys kept elsewhere: read beside the rest (its backend, not this pool, does most of the work).
  const source = query.service === undefined ? undefined : options.storeFigures?.get(query.service);
  const storeElsewhere = source && query.service !== undefined ? readStoreElsewhere(db, { service: query.service, scope: query.scope }, source) : Promise.resolve(null);
  const storeElsewhereSeries = source && query.service !== undefined ? readKeptElsewhereSeries(db, { service: query.service, from: window.from, to: window.to, stepSeconds: step }) : Promise.resolve(null);
  const [{ scopes, counts, latency }, ranked, samples, lastSweep, since, stale, alertInputs, scopeFigures, events, compared, capacity] = await readTogether(db, [
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
    () =>
      readAlertInputs(db, {
        sweepIntervalSeconds,
        thresholds,
        checksFor: { service: query.service, scope: query.scope },
        now: window.now,
        lastSweep: lastFinishedSweep,
        databaseMemoryBytes: options.databaseMemoryBytes,
        ...(replicaLag === undefined ? {} : { replicaLag }),
        staleElsewhere: options.staleElsewhere,
      }),
    () => readLatestScopeFigures(db, window.to),
    () => readOverviewEvents(db, { from: window.from, to: window.to, service: query.service ?? null, scope: query.scope ?? null }),
    // The same window earlier, read as a query of that window would read it.
    async () => {
      if (compareOffset === null) return null;
      const earlier = { ...range, from: new Date(window.from.getTime() - compareOffset * 1000), to: new Date(window.to.getTime() - compareOffset * 1000) };
      const series = await readOverviewSeries(db, earlier);
      return { offsetSeconds: compareOffset, flow: flowPoints(series.counts, series.latency, earlier.from, earlier.to, step, window.now) };
    },
    () => readCapacity(db, { service: query.service, databaseMemoryBytes: options.databaseMemoryBytes }),
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
  // A service's own alert (a service, no scope: unrecorded completions) shows with any of its scopes.
  const chosen = (alert: { storeWide: boolean; service: string | null; scope: string | null }) =>
    alert.storeWide ||
    ((query.service === undefined || alert.service === query.service) && (query.scope === undefined || alert.scope === query.scope || (alert.scope === null && alert.service !== null)));
  const states = evaluateAlertStates(alertInputs, thresholds);
  const alerts = states.firing.filter(chosen);
  const pending = states.pending.filter(chosen);

  const scopeSample = scopeFigures.filter((figure) => figure.sampledAt >= window.from);
  const [elsewhere, elsewhereSeries] = await Promise.all([storeElsewhere, storeElsewhereSeries]);
  return {
    range: readRange,
    absolute: absolute !== null,
    stepSeconds: step,
    from: window.from.toISOString(),
    to: window.to.toISOString(),
    service: query.service ?? null,
    services,
    scope: query.scope ?? null,
    scopes: [...new Set(scopes.filter((row) => query.service === undefined || row.service === query.service).map((row) => row.scope))].sort(),
    flow: flowPoints(counts, latency, window.from, window.to, step, window.now),
    ...(compared ? { compare: compared } : {}),
    events: [
      // A firing the history holds open is marked from it (events); the others as evaluated now.
      ...alerts
        .filter((alert) => alert.since !== null && alert.since >= window.from && alert.since < window.to && !isRecordedOpen(alert, events.openAlerts))
        .map((alert): OverviewEvent => ({ at: (alert.since as Date).toISOString(), kind: 'alert', text: `Alert started: ${alert.summary}`, ...(alert.service ? { service: alert.service } : {}), ...(alert.scope ? { scope: alert.scope } : {}) })),
      ...events.events,
    ].sort((a, b) => b.at.localeCompare(a.at)),
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
    checks: evaluateChecks(alertInputs, alerts, thresholds, { service: query.service, scope: query.scope }, pending),
    objectives: {
      claimP99Ms: thresholds.claimP99ObjectiveMs,
      conflictShare: thresholds.conflictShare,
      mismatchShare: thresholds.mismatchShare,
      rowsOverBaselineRatio: thresholds.rowsOverBaselineRatio,
    },
    dataSince: since.rows[0]?.since?.toISOString() ?? null,
    now: window.now.toISOString(),
    // A service kept elsewhere: its backend's (none in Postgres); not answered there, none known.
    staleClaims: elsewhere
      ? { count: elsewhere.staleClaims?.count ?? 0, oldestPastLeaseSeconds: elsewhere.staleClaims?.oldestPastLeaseSeconds ?? null }
      : { count: stale.rows[0]?.n ?? 0, oldestPastLeaseSeconds: stale.rows[0]?.oldest ?? null },
    capacity: { ...capacity, thresholdShare: thresholds.indexOverMemoryShare },
    replica: alertInputs.replica ? { ...alertInputs.replica, measuredAt: alertInputs.replica.measuredAt.toISOString(), thresholdSeconds: thresholds.replicaLagSeconds } : null,
    principals,
    storeElsewhere: elsewhere,
    storeElsewhereSeries: elsewhereSeries,
  };
}

/**
 * The flow points of [from, to) at `step`, one per step, from the series' rows. `now` is the
 * server's clock: the step it falls in has run only since its start.
 */
function flowPoints(
  counts: { t: Date; outcome: ClaimOutcome; n: string }[],
  latency: { t: Date; buckets: number[]; counts: number[] }[],
  from: Date,
  to: Date,
  step: number,
  now: Date,
): FlowPoint[] {
  const flow = new Map<number, { counts: Record<ClaimOutcome, number>; latency: number[] }>();
  for (let t = from.getTime(); t < to.getTime(); t += step * 1000) flow.set(t, { counts: zeroes(), latency: new Array<number>(BUCKET_COUNT).fill(0) });
  for (const row of counts) {
    const point = flow.get(row.t.getTime());
    if (point) point.counts[row.outcome] += Number(row.n);
  }
  for (const row of latency) {
    const point = flow.get(row.t.getTime());
    if (point) row.buckets.forEach((bucket, i) => (point.latency[bucket] = (point.latency[bucket] ?? 0) + (row.counts[i] ?? 0)));
  }
  return [...flow.entries()].map(([t, point]) => {
    const claims = claimOutcomes.reduce((sum, outcome) => sum + point.counts[outcome], 0);
    const perSecond = zeroes();
    const share = zeroes();
    // The current step has run only since its start: its rate is over that, not the whole step.
    const seconds = Math.max(1, Math.min(step, (now.getTime() - t) / 1000));
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
  });
}

/**
 * The stored events of [from, to), of a chosen service (and scope) or all: policy creations and
 * changes (endpoint_policy_history) and failed sweep runs (sweep_runs), each at most
 * EVENTS_PER_KIND, newest first. A policy's history is read per policy (never deleted: every
 * history row has one), newest version first, through endpoint_policy_history_endpoint_idx:
 * policy changes are made by people, so each endpoint's history is short. The sweep runs are a
 * backward scan of their primary key (id grows with the time), and the runs
 * scanned stop at the last run that had finished before `from`, as the store sample at or
 * before `from` recorded it (store_stats.last_sweep_run_id, a probe of its primary key), so a
 * window's read does not walk the runs before it. Then the alert history's starts and ends in
 * the window (readAlertHistory, with the firings still open, which the live alerts are checked
 * against) and the service instances' starts, of the chosen service or of all (readInstanceStarts:
 * createRetrysafe records each, an adopting service's and this server's demo service's alike).
 */
export async function readOverviewEvents(
  db: Queryable,
  choice: { from: Date; to: Date; service: string | null; scope: string | null },
): Promise<{ events: OverviewEvent[]; openAlerts: AlertFiring[] }> {
  const [policies, sweeps, alertHistory, starts] = await readTogether(db, [
    () =>
      db.query<{ at: Date; service: string; endpoint: string; version: number; created: boolean; breaking: boolean }>({
        name: 'dashboard_overview_policy_events',
        text: `SELECT h.at, p.service, p.endpoint, h.version, h.created, h.breaking FROM endpoint_policies p
               CROSS JOIN LATERAL (
                 SELECT changed_at AS at, version, previous IS NULL AS created, breaking FROM endpoint_policy_history h
                 WHERE h.service = p.service AND h.endpoint = p.endpoint AND h.changed_at >= $1 AND h.changed_at < $2
                 ORDER BY h.version DESC LIMIT ${EVENTS_PER_KIND}
               ) h
               WHERE ($3::text IS NULL OR p.service = $3) AND ($4::text IS NULL OR p.endpoint = $4)
               ORDER BY h.at DESC LIMIT ${EVENTS_PER_KIND}`,
        values: [choice.from, choice.to, choice.service, choice.scope],
      }),
    // A sweep run is the store's, whatever the service chosen.
    () =>
      db.query<{ id: string; at: Date }>({
        name: 'dashboard_overview_sweep_events',
        text: `SELECT id, started_at AS at FROM sweep_runs
               WHERE status = 'failed' AND started_at >= $1 AND started_at < $2
                 AND id > coalesce((SELECT last_sweep_run_id FROM store_stats WHERE sampled_at <= $1 ORDER BY sampled_at DESC LIMIT 1), 0)
               ORDER BY id DESC LIMIT ${EVENTS_PER_KIND}`,
        values: [choice.from, choice.to],
      }),
    () => readAlertHistory(db, choice),
    () => readInstanceStarts(db, choice, EVENTS_PER_KIND),
  ]);
  const where = (firing: AlertFiring) => ({ ...(firing.service ? { service: firing.service } : {}), ...(firing.scope ? { scope: firing.scope } : {}) });
  const events = [
    ...policies.rows.map((row): OverviewEvent => ({
      at: row.at.toISOString(),
      kind: 'policy',
      text: `Policy ${row.created ? 'created' : 'changed'}: ${row.endpoint} (${row.service}), version ${row.version}${row.breaking ? ', a shorter retry window' : ''}`,
      service: row.service,
      scope: row.endpoint,
    })),
    ...sweeps.rows.map((row): OverviewEvent => ({ at: row.at.toISOString(), kind: 'sweep_failed', text: `Sweep run ${row.id} failed` })),
    ...alertHistory.started.map((firing): OverviewEvent => ({ at: firing.startedAt.toISOString(), kind: 'alert', text: `Alert started: ${firing.summary}`, ...where(firing) })),
    ...alertHistory.ended.map((firing): OverviewEvent => ({
      at: (firing.endedAt ?? firing.startedAt).toISOString(),
      kind: 'alert_end',
      text: `Alert ended after ${durationText((firing.endedAt ?? firing.startedAt).getTime() - firing.startedAt.getTime())}: ${firing.summary}`,
      ...where(firing),
    })),
    ...starts.map((start): OverviewEvent => ({
      at: start.at.toISOString(),
      kind: 'instance_start',
      text: `Instance of ${start.service} started (${start.instance}), @retrysafe/store ${start.packageVersion}`,
      service: start.service,
    })),
  ];
  return { events, openAlerts: alertHistory.open };
}

/** The shortest range at least as long as [from, to): its step gives the window 60 to 170 points at most. */
export function rangeForWindow(from: Date, to: Date): OverviewRange {
  const span = (to.getTime() - from.getTime()) / 1000;
  const ranges = Object.keys(overviewRanges) as OverviewRange[];
  return ranges.find((range) => overviewRanges[range] >= span) ?? '30d';
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
