// The Prometheus exposition (GET /api/metrics), with prom-client on a registry of its own.
// Flow counters and the claim-latency histogram are this instance's (Prometheus sums
// instances); store gauges are read at scrape time from catalog- and index-served queries,
// so every instance reports the same store. Conventional names: retrysafe_*_total for
// counters, *_seconds and *_bytes units.
import { timingSafeEqual } from 'node:crypto';
import type pg from 'pg';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { BUCKET_BOUNDS_MS, claimOutcomes, type FlowObserver } from '@retrysafe/store';
import type { Queryable } from '@retrysafe/store/postgres';
import { readReconcileCounts } from '../idempotency/reconcile';
import { alertThresholds, evaluateAlerts, readAlertInputs, readUnrecordedCounts, type AlertThresholds, type PolicyPoint } from './alerts';
import { readLatestScopeFigures } from './scope-sample';
import { readStoreFigures } from './store-figures';
import { readIndexMemory } from './capacity';
import { readLastFinishedSweep } from '../retention/review';
import type { ReplicaLag } from './replica-lag';
import type { StaleElsewhere, StaleElsewhereReader } from './stale-elsewhere';

export interface PrometheusMetrics {
  registry: Registry;
  /** Feed it the store's flow events (alongside the recorder). */
  observer: FlowObserver;
}

export interface PrometheusOptions {
  /** SWEEP_INTERVAL_SECONDS, exported so a rule can tell a stalled sweeper (its default when not given). */
  sweepIntervalSeconds?: number;
  /**
   * The dashboard's standby's lag (readReplicaLag on the dashboard's pools), when it reads one
   * (DASHBOARD_READ_URL): exported, and judged by the replica_lag alert.
   */
  replicaLag?: () => Promise<ReplicaLag>;
  /**
   * The store's completion bookkeeping (IdempotencyStore's counters), this instance: attempts
   * whose work ran and whose completion could not be recorded (each also reported to onError
   * with its key), and completions sent again within their lease after a transient failure.
   */
  completions?: () => { unrecorded: number; retried: number };
  /** The flow recorder's traced attempts dropped over their principal's per-minute budget (issue 31.1). */
  droppedAttempts?: () => number;
  /** DATABASE_MEMORY_BYTES, when the operator set it: the memory the unique index is held against (else shared_buffers). */
  databaseMemoryBytes?: number | undefined;
  /**
   * The stale claims of the services kept in Redis or MySQL (the dashboard's staleElsewhereReader,
   * asked for at scrape time: the dashboard's connections open on first use); absent: none.
   */
  staleElsewhere?: () => StaleElsewhereReader | undefined;
}

export function createPrometheusMetrics(pool: pg.Pool, thresholds: AlertThresholds = alertThresholds, options: PrometheusOptions = {}): PrometheusMetrics {
  const sweepIntervalSeconds = options.sweepIntervalSeconds ?? 60;
  const registry = new Registry();
  const claims = new Counter({
    name: 'retrysafe_claims_total',
    help: 'Claims by service, scope and outcome (new, replay, conflict, mismatch, takeover, rejected, error), this instance',
    labelNames: ['service', 'scope', 'outcome'],
    registers: [registry],
  });
  const latency = new Histogram({
    name: 'retrysafe_claim_duration_seconds',
    help: 'Latency of the claim statement, this instance',
    labelNames: ['service', 'scope'],
    buckets: BUCKET_BOUNDS_MS.filter(Number.isFinite).map((bound) => bound / 1000),
    registers: [registry],
  });

  const completions = options.completions;
  if (completions) {
    const completionCounter = (name: string, help: string, pick: (counts: { unrecorded: number; retried: number }) => number) =>
      new Counter({
        name,
        help,
        registers: [registry],
        collect() {
          this.reset();
          this.inc(pick(completions()));
        },
      });
    completionCounter(
      'retrysafe_unrecorded_completions_total',
      'Attempts whose work ran and whose completion could not be recorded (the key waits for its lease; each reported with its key), this instance',
      (counts) => counts.unrecorded,
    );
    completionCounter('retrysafe_completion_retries_total', 'Completions sent again within their lease after a transient failure, this instance', (counts) => counts.retried);
  }

  const droppedAttempts = options.droppedAttempts;
  if (droppedAttempts) {
    new Counter({
      name: 'retrysafe_trace_dropped_attempts_total',
      help: "Replays, conflicts, mismatches and quota refusals not kept in the trace of attempts because their principal's per-minute budget was spent, this instance",
      registers: [registry],
      collect() {
        this.reset();
        this.inc(droppedAttempts());
      },
    });
  }

  // Every instance's (and every service's) unrecorded completions, as the overview counts them:
  // every instance reports the same, so a rule takes the max.
  new Gauge({
    name: 'retrysafe_unrecorded_completions_window',
    help: `Completions whose work ran and whose response could not be recorded in the last ${thresholds.unrecordedWindowMinutes} min, by service, every instance's (from the database)`,
    labelNames: ['service'],
    registers: [registry],
    async collect() {
      const counts = await readUnrecordedCounts(pool, null, thresholds.unrecordedWindowMinutes);
      this.reset();
      for (const count of counts) this.set({ service: count.service }, count.count);
    },
  });

  // What the Redis-kept services' reconcilers found (migration 0027), from the database: every
  // instance reports the same, so a rule takes the max. One read per scrape for the three.
  const reconcile = sharedPerScrape(() => readReconcileCounts(pool, null));
  new Gauge({
    name: 'retrysafe_reconcile_findings',
    help: "Redis-kept services' reconciliation findings by service, scope and kind: effect_missing (completed keys whose effect is not in the service's database), stale_claim (in progress past the lease); sampled, so a lower bound",
    labelNames: ['service', 'scope', 'kind'],
    registers: [registry],
    async collect() {
      const services = await reconcile();
      this.reset();
      for (const service of services) {
        for (const scope of service.scopes) {
          this.set({ service: service.service, scope: scope.scope, kind: 'effect_missing' }, scope.effectMissing);
          this.set({ service: service.service, scope: scope.scope, kind: 'stale_claim' }, scope.staleClaims);
        }
      }
    },
  });
  new Gauge({
    name: 'retrysafe_reconcile_last_run_timestamp_seconds',
    help: "When each Redis-kept service's reconciler last ran (Unix time)",
    labelNames: ['service'],
    registers: [registry],
    async collect() {
      const services = await reconcile();
      this.reset();
      for (const service of services) if (service.lastRunAt) this.set({ service: service.service }, Date.parse(service.lastRunAt) / 1000);
    },
  });
  new Gauge({
    name: 'retrysafe_reconcile_effect_errors',
    help: "effectExists calls that failed or timed out in each Redis-kept service's last reconciler run",
    labelNames: ['service'],
    registers: [registry],
    async collect() {
      const services = await reconcile();
      this.reset();
      for (const service of services) if (service.lastRunAt) this.set({ service: service.service }, service.effectErrors);
    },
  });

  // Store gauges: one query per scrape, shared by all of them.
  const figures = sharedPerScrape(() => readStoreFigures(pool));
  const storeGauge = (name: string, help: string, pick: (value: Awaited<ReturnType<typeof readStoreFigures>>) => number | null) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      async collect() {
        const value = pick(await figures());
        if (value !== null) this.set(value);
      },
    });
  storeGauge('retrysafe_store_rows_estimate', 'Estimated rows in the key store (catalog statistics)', (f) => f.estimatedRows);
  storeGauge('retrysafe_store_table_bytes', 'Heap bytes of the key store', (f) => f.tableBytes);
  storeGauge('retrysafe_store_index_bytes', 'Index bytes of the key store', (f) => f.indexBytes);
  storeGauge('retrysafe_store_toast_bytes', 'TOAST bytes of the key store', (f) => f.toastBytes);
  storeGauge('retrysafe_store_oldest_row_age_seconds', 'Age of the row that expires first', (f) => f.oldestRowAgeSeconds);
  storeGauge('retrysafe_store_cleanup_lag_seconds', 'How far behind the cleanup is: the oldest surviving row\'s time past its expiry, or in the partitioned layout the time since the oldest partition still attached ended or since the sweeper\'s walk of keys promised less than a day fell behind, the longer', (f) => f.cleanupLagSeconds);
  // Stale claims: Postgres's (no label), and each service kept in Redis or MySQL from its backend
  // (service and backend labels; at most STALE_COUNTED counted). A backend that did not answer
  // has no series here, never 0: retrysafe_stale_claims_unread says so, and the rule fires on it.
  const staleReader = options.staleElsewhere;
  const staleElsewhere = sharedPerScrape(async () => (await staleReader?.()?.()) ?? []);
  for (const [name, help, pick, pickElsewhere] of [
    ['retrysafe_stale_claims', 'In-progress claims whose lease has passed: the Postgres store\'s (no labels), and each Redis- or MySQL-kept service\'s (at most 1000 counted)', (f) => f.staleClaims, (claims) => claims.count],
    [
      'retrysafe_stale_claim_oldest_seconds',
      'How long the oldest stale claim has been past its lease (0 when none): the Postgres store\'s (no labels), and each Redis- or MySQL-kept service\'s',
      (f) => f.oldestStaleSeconds,
      (claims) => claims.oldestPastLeaseSeconds ?? 0,
    ],
  ] as const satisfies readonly (readonly [string, string, (f: Awaited<ReturnType<typeof readStoreFigures>>) => number, (claims: NonNullable<StaleElsewhere['claims']>) => number])[]) {
    new Gauge({
      name,
      help,
      labelNames: ['service', 'backend'],
      registers: [registry],
      async collect() {
        const [store, elsewhere] = await Promise.all([figures(), staleElsewhere()]);
        this.reset();
        this.set(pick(store));
        for (const reading of elsewhere) if (reading.claims !== null) this.set({ service: reading.service, backend: reading.backend }, pickElsewhere(reading.claims));
      },
    });
  }
  new Gauge({
    name: 'retrysafe_stale_claims_unread',
    help: "Whether a Redis- or MySQL-kept service's stale claims could not be read at this scrape (1: its key backend did not answer; its stale-claim series are absent), by service and backend",
    labelNames: ['service', 'backend'],
    registers: [registry],
    async collect() {
      const elsewhere = await staleElsewhere();
      this.reset();
      for (const reading of elsewhere) this.set({ service: reading.service, backend: reading.backend }, reading.claims === null ? 1 : 0);
    },
  });
  // The unique index against the database's memory (capacity.ts), one catalog read per scrape.
  const indexMemory = sharedPerScrape(() => readIndexMemory(pool, options.databaseMemoryBytes));
  new Gauge({
    name: 'retrysafe_store_unique_index_bytes',
    help: "Bytes of the key table's unique index (every partition's): the index every claim inserts into",
    registers: [registry],
    async collect() {
      this.set((await indexMemory()).uniqueIndexBytes);
    },
  });
  new Gauge({
    name: 'retrysafe_database_memory_bytes',
    help: "The database's memory the unique index is held against: DATABASE_MEMORY_BYTES where set, else shared_buffers",
    registers: [registry],
    async collect() {
      this.set((await indexMemory()).memoryBytes);
    },
  });
  new Gauge({
    name: 'retrysafe_store_baseline_rows',
    help: 'Rows a store that expires on time would hold (new keys within each scope\'s trailing retention; in the partitioned layout, since the current partition began less the retention), from the last store-statistics sample',
    registers: [registry],
    async collect() {
      const baseline = await readLatestBaseline(pool);
      this.reset();
      if (baseline !== null) this.set(baseline);
    },
  });

  // Per scope, from the sampler's last sample (a page sample of the table, not redone per scrape).
  const scopeFigures = sharedPerScrape(() => readLatestScopeFigures(pool));
  for (const [name, help, pick] of [
    ['retrysafe_store_scope_rows_estimate', 'Estimated rows of each scope in the key store (page sample, once a minute)', (figure) => figure.estimatedRows],
    ['retrysafe_store_response_bytes', 'Estimated stored response bytes of each scope (page sample, once a minute)', (figure) => figure.responseBytes],
  ] as const satisfies readonly (readonly [string, string, (figure: Awaited<ReturnType<typeof readLatestScopeFigures>>[number]) => number])[]) {
    new Gauge({
      name,
      help,
      labelNames: ['service', 'scope'],
      registers: [registry],
      async collect() {
        this.reset();
        for (const figure of await scopeFigures()) this.set({ service: figure.service, scope: figure.scope }, pick(figure));
      },
    });
  }

  new Gauge({
    name: 'retrysafe_sweep_last_run_timestamp_seconds',
    help: 'When the last finished sweep run finished (present while the next one runs)',
    labelNames: ['status'],
    registers: [registry],
    async collect() {
      const last = await readLastFinishedSweep(pool);
      this.reset();
      if (last) this.set({ status: last.status }, last.finishedAt.getTime() / 1000);
    },
  });
  new Gauge({
    name: 'retrysafe_sweep_interval_seconds',
    help: 'How often each instance tries to sweep (SWEEP_INTERVAL_SECONDS)',
    registers: [registry],
  }).set(sweepIntervalSeconds);
  const policies = sharedPerScrape(() => readPolicyWindows(pool));
  for (const [name, help, pick] of [
    ['retrysafe_policy_retry_window_seconds', 'Documented retry window of each endpoint (the promise)', (policy) => policy.retryWindowSeconds],
    ['retrysafe_policy_retention_seconds', 'Retention applied to the keys of each endpoint', (policy) => policy.retentionSeconds],
  ] as const satisfies readonly (readonly [string, string, (policy: PolicyPoint) => number])[]) {
    new Gauge({
      name,
      help,
      labelNames: ['service', 'scope'],
      registers: [registry],
      async collect() {
        this.reset();
        for (const policy of await policies()) this.set({ service: policy.service, scope: policy.endpoint }, pick(policy));
      },
    });
  }
  new Gauge({
    name: 'retrysafe_sweep_last_rows_deleted',
    help: 'Rows deleted by the last finished sweep run',
    registers: [registry],
    async collect() {
      this.set((await readLastFinishedSweep(pool))?.rowsDeleted ?? 0);
    },
  });

  // The standby, once per scrape; a standby that cannot be read leaves its gauges out (and its
  // reads fail on the dashboard) rather than failing the whole scrape.
  const replicaLag = options.replicaLag;
  const replica = replicaLag === undefined ? undefined : sharedPerScrape(() => replicaLag().catch(() => undefined));
  if (replica) {
    for (const [name, help, pick] of [
      ['retrysafe_dashboard_replica_in_recovery', "Whether the dashboard's standby (DASHBOARD_READ_URL) is in recovery (1), or was promoted (0); absent when it cannot be read", (lag) => (lag.inRecovery ? 1 : 0)],
      ['retrysafe_dashboard_replica_lag_seconds', "How far the dashboard's standby is behind the primary: 0 when it has replayed all the primary had written, else the time since its last replayed commit", (lag) => lag.seconds],
      ['retrysafe_dashboard_replica_lag_bytes', "WAL bytes the primary had written that the dashboard's standby has not replayed", (lag) => lag.bytes],
    ] as const satisfies readonly (readonly [string, string, (lag: ReplicaLag) => number | null])[]) {
      new Gauge({
        name,
        help,
        registers: [registry],
        async collect() {
          const lag = await replica();
          const value = lag === undefined ? null : pick(lag);
          this.reset();
          if (value !== null) this.set(value);
        },
      });
    }
  }

  new Gauge({
    name: 'retrysafe_alert_firing',
    help: 'Alerts firing now (1), by name, severity and (for a scope\'s flow alert) service and scope (a service\'s own alert: its service), evaluated from the stored series',
    labelNames: ['name', 'severity', 'service', 'scope'],
    registers: [registry],
    async collect() {
      this.reset();
      const inputs = await readAlertInputs(pool, { sweepIntervalSeconds, thresholds, databaseMemoryBytes: options.databaseMemoryBytes, ...(replica ? { replicaLag: replica } : {}), staleElsewhere });
      // A service's own alert (a service, no scope: e.g. a kept-elsewhere service's stale claims) carries its service.
      for (const alert of evaluateAlerts(inputs, thresholds)) {
        this.set({ name: alert.name, severity: alert.severity, ...(alert.service === null ? {} : { service: alert.service }), ...(alert.scope === null || alert.service === null ? {} : { scope: alert.scope }) }, 1);
      }
    },
  });

  // Every outcome of a scope is exported (at 0) from the scope's first claim on, so rate()
  // sees a series' first increase instead of starting from its first non-zero sample.
  const seenScopes = new Set<string>();
  return {
    registry,
    observer: {
      record(event) {
        const labels = { service: event.service, scope: event.scope };
        const seen = `${event.service}\0${event.scope}`;
        if (!seenScopes.has(seen)) {
          seenScopes.add(seen);
          for (const outcome of claimOutcomes) claims.inc({ ...labels, outcome }, 0);
        }
        claims.inc({ ...labels, outcome: event.outcome });
        if (event.claimLatencyMs !== undefined) latency.observe(labels, event.claimLatencyMs / 1000);
      },
    },
  };
}

/** The baseline of the last store-statistics sample (primary key, newest first); null before the first. */
async function readLatestBaseline(db: Queryable): Promise<number | null> {
  const { rows } = await db.query<{ baseline_rows: string }>({
    name: 'metrics_latest_baseline',
    text: 'SELECT baseline_rows FROM store_stats ORDER BY sampled_at DESC LIMIT 1',
  });
  return rows[0] ? Number(rows[0].baseline_rows) : null;
}

/** Each endpoint's documented window and applied retention (a handful of rows). */
async function readPolicyWindows(db: Queryable): Promise<PolicyPoint[]> {
  const { rows } = await db.query<{ service: string; endpoint: string; retry_window_seconds: number; retention_seconds: number }>({
    name: 'metrics_policy_windows',
    text: 'SELECT service, endpoint, retry_window_seconds, retention_seconds FROM endpoint_policies ORDER BY service, endpoint',
  });
  return rows.map((row) => ({ service: row.service, endpoint: row.endpoint, retryWindowSeconds: row.retry_window_seconds, retentionSeconds: row.retention_seconds }));
}

/** One read shared by the gauges of a scrape: later callers within a second get the same promise. */
function sharedPerScrape<T>(read: () => Promise<T>): () => Promise<T> {
  let pending: Promise<T> | null = null;
  return () => (pending ??= read().finally(() => setTimeout(() => (pending = null), 1_000).unref()));
}

/** Bearer-token check for /api/metrics; constant-time, and open when no token is configured. */
export function metricsAuthorized(authorization: string | null, token: string | undefined): boolean {
  if (!token) return true;
  const expected = Buffer.from(`Bearer ${token}`);
  const given = Buffer.from(authorization ?? '');
  return given.length === expected.length && timingSafeEqual(given, expected);
}
