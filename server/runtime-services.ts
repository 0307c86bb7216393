// The booted half of the server's runtime (server/runtime.ts), loaded by its services() on
// first use: the store (in the database's layout) on its own pool, its flow recorder and quota,
// the sweeper, the periodic duties (roll-ups, store statistics, alert history, sign-in throttle
// pruning), the demo API and, when enabled, its traffic. (createRetrysafe records this start.)
import type pg from 'pg';
import { createPool } from '../db/client';
import { detectStoreLayout } from '../db/migrate';
import { SessionDutyRefused } from '../db/topology';
import { requireStoreSecrets } from './config';
import { connectionBudget } from './connection-budget';
import { createDemoApi, type DemoApi } from './demo/api';
import { DEMO_SERVICE, defaultPolicies } from './demo/policies';
import { FakeProcessor } from './demo/processor';
import { TrafficGenerator } from './demo/traffic';
import { createRetrysafe, periodicTask, type FlowRecorder, type IdempotencyStore, type LiveKeyQuota, type PeriodicTask, type ServicePolicies } from '@retrysafe/store';
import { storePoolSettings } from '@retrysafe/store/postgres';
import { Sweeper } from './retention/sweeper';
import { thresholdsWith, type AlertThresholds } from './metrics/alerts';
import { createPrometheusMetrics, type PrometheusMetrics } from './metrics/prometheus';
import { rollUpFlowMetrics } from './metrics/rollup';
import { pruneThrottle } from './auth/throttle';
import { sampleStoreStats } from './metrics/sampler';
import { recordAlertHistory } from './metrics/alert-history';
import { sampleKeptElsewhere } from './metrics/kept-elsewhere-samples';
import { describeError, logConnectionLost } from './logging';
import { createReplicaLagReader } from './dashboard-pools';
import { logEvent, requestPathTimeouts, type ServerRuntime } from './runtime';

/** What the request path and the dashboard's overview take from a booted instance. */
export interface Services {
  ownerPool: pg.Pool;
  store: IdempotencyStore;
  /** The demo service's policies, refreshed from the database (the package's registry). */
  policies: ServicePolicies;
  quota: LiveKeyQuota;
  /** null when it was refused: DATABASE_POOLER=transaction and no DATABASE_DIRECT_URL (db/topology.ts). */
  sweeper: Sweeper | null;
  recorder: FlowRecorder;
  prometheus: PrometheusMetrics;
  metricsToken: string | undefined;
  alertThresholds: AlertThresholds;
  /** SWEEP_INTERVAL_SECONDS, for the stalled-sweeper alert. */
  sweepIntervalSeconds: number;
  /** DATABASE_MEMORY_BYTES, for the capacity figures and their check. */
  databaseMemoryBytes: number | undefined;
  demo: DemoApi;
}

export interface Booted {
  services: Services;
  /** The store's pool, closed by the runtime once stopDuties() flushed what the store recorded. */
  storePool: pg.Pool;
  replicaLag: { end(): Promise<void> } | undefined;
  /** Stops the duties, then flushes the recorder and the quota (the package's stop()). */
  stopDuties(): Promise<void>;
}

export async function boot(runtime: ServerRuntime): Promise<Booted> {
  const { environment, ownerPool: pool, databaseUrl } = runtime;
  const secrets = requireStoreSecrets(environment);
  // The sweeper's leader election is a session advisory lock: a direct connection of its own
  // (DATABASE_DIRECT_URL when DATABASE_URL is pooled), or none, said once, while requests run on.
  // Asked first: a runtime stopping meanwhile refuses here, before this boot opened anything.
  const sweeperPool = sessionPoolOrRefusal(runtime);
  const layout = await detectStoreLayout(pool);
  // The store's own connections, with the session settings its plans rely on (statements.ts);
  // a transactional endpoint's work runs on them too, inside the claim's transaction.
  const storePool = createPool(databaseUrl, {
    applicationName: 'retrysafe-store',
    max: connectionBudget(environment.DATABASE_CONNECTIONS).store,
    onConnectionLost: logConnectionLost,
    ...requestPathTimeouts(environment.DATABASE_STATEMENT_TIMEOUT_MS),
    client: storePoolSettings(environment.DATABASE_POOLER),
    // Through a pooler that tracks named statements the store keeps its own named (checked when the store starts).
    keepStatementNames: environment.DATABASE_POOLER === 'transaction-prepared',
  });
  const thresholds = thresholdsWith(environment.ALERT_THRESHOLDS);
  // The dashboard's standby (DASHBOARD_READ_URL), when it reads one: its lag in /api/metrics.
  const replicaLag = createReplicaLagReader(environment, pool);
  // The stale claims of services kept in Redis or MySQL (DASHBOARD_KEYS_REDIS, DASHBOARD_KEYS_MYSQL),
  // through the dashboard's key backends (opened on first use), for /api/metrics and the alert history.
  const keptElsewhere = environment.DASHBOARD_KEYS_REDIS !== undefined || environment.DASHBOARD_KEYS_MYSQL !== undefined;
  const staleElsewhere = keptElsewhere ? () => runtime.dashboard().pools.keys.staleElsewhere : undefined;
  // The store's completion counters, read at scrape time (the store is made below).
  const storeCounters: { of?: { unrecordedCompletions: number; completionRetries: number }; recorder?: { droppedAttempts: number } } = {};
  const prometheus = createPrometheusMetrics(pool, thresholds, {
    sweepIntervalSeconds: environment.SWEEP_INTERVAL_SECONDS,
    databaseMemoryBytes: environment.DATABASE_MEMORY_BYTES,
    ...(replicaLag ? { replicaLag: replicaLag.read } : {}),
    completions: () => ({ unrecorded: storeCounters.of?.unrecordedCompletions ?? 0, retried: storeCounters.of?.completionRetries ?? 0 }),
    droppedAttempts: () => storeCounters.recorder?.droppedAttempts ?? 0,
    ...(staleElsewhere ? { staleElsewhere } : {}),
  });
  let retrysafe: Awaited<ReturnType<typeof createRetrysafe>>;
  try {
    // The same composition root an adopting service uses; this server adds the shared duties.
    // The demo API is one service among those the dashboard shows; its default policies are
    // created on first start and read from the database from then on.
    retrysafe = await createRetrysafe({
      pool: storePool,
      // Through a transaction pooler the store sends no startup options, and no named statements
      // unless the pooler tracks them (transaction-prepared: checked when the store starts).
      ...(environment.DATABASE_POOLER ? { pooler: environment.DATABASE_POOLER } : {}),
      service: DEMO_SERVICE,
      policies: defaultPolicies,
      layout,
      fingerprintSecret: secrets.fingerprintSecret,
      responseKeys: secrets.encryptionKeys,
      metricsFlushIntervalMs: environment.METRICS_FLUSH_SECONDS * 1000,
      observer: prometheus.observer,
      onLeaseLost: (id) => logEvent('error', 'an attempt finished after its lease was taken over', { scope: id.scope }),
      onAbandonFailed: (error, id) =>
        logEvent('error', 'a failed attempt could not be marked retryable: its key stays in progress until the lease ends', { scope: id.scope, error: describeError(error) }),
      // A completion that could not be recorded names its key, so an operator can look it up.
      onError: (error, { task, key }) => logEvent('error', `${task} failed`, { error: describeError(error), ...(key ? { key } : {}) }),
    });
  } catch (error) {
    // A boot that failed leaves nothing open; the next call boots again.
    await Promise.allSettled([storePool.end(), replicaLag?.end()]);
    throw error;
  }
  const quota = retrysafe.quota;
  if (!quota) {
    // (createRetrysafe with a pool always makes one; a boot without it leaves nothing open either.)
    await Promise.allSettled([retrysafe.stop(), storePool.end(), replicaLag?.end()]);
    throw new Error('the dashboard runs with the live-key quota');
  }
  const { store, recorder, policies } = retrysafe;
  storeCounters.of = store;
  storeCounters.recorder = recorder;
  const sweeper = sweeperPool && new Sweeper(
    sweeperPool,
    environment.SWEEP_INTERVAL_SECONDS * 1000,
    { staleGraceMs: environment.STALE_CLAIM_RELEASE_AFTER_SECONDS * 1000 },
    (result) => {
      if (result.status !== 'skipped' && (result.rowsDeleted > 0 || result.staleReleased > 0 || result.status === 'failed')) {
        logEvent(result.status === 'failed' ? 'error' : 'info', 'sweep', {
          runId: result.runId,
          rowsDeleted: result.rowsDeleted,
          staleReleased: result.staleReleased,
          chunks: result.chunks,
          error: result.error,
        });
      }
    },
    (error) => logEvent('error', 'sweep failed', { error: describeError(error) }),
  );
  const processor = new FakeProcessor({ latencyMs: environment.DEMO_PROCESSOR_LATENCY_MS, failureRate: environment.DEMO_PROCESSOR_FAILURE_RATE });
  const demo = createDemoApi({
    store,
    pool,
    processor,
    policyFor: (endpoint) => policies.policyFor(endpoint),
    onError: (error, correlationId) => logEvent('error', 'request failed', { error: describeError(error), correlationId }),
  });
  sweeper?.start();
  const failed = (error: unknown, task: string) => logEvent('error', `${task} failed`, { error: describeError(error) });
  const tasks: PeriodicTask[] = [
    periodicTask({
      name: 'metrics roll-up',
      intervalMs: 5 * 60_000,
      run: () =>
        rollUpFlowMetrics(pool, {
          minuteRetentionMs: environment.METRICS_MINUTE_RETENTION_HOURS * 3_600_000,
          hourRetentionMs: environment.METRICS_HOUR_RETENTION_DAYS * 86_400_000,
        }),
      onError: failed,
    }),
    periodicTask({ name: 'sign-in throttle pruning', intervalMs: 5 * 60_000, run: () => pruneThrottle(pool), onError: failed }),
    // The first sample soon after boot, so a new dashboard has a store point within seconds.
    periodicTask({ name: 'store statistics sample', intervalMs: 60_000, firstRunAfterMs: 5_000, run: () => sampleStoreStats(pool), onError: failed }),
    // What the backends of services kept in Redis or MySQL hold, a row a minute and service (the overview's chart of them).
    ...(keptElsewhere
      ? [
          periodicTask({
            name: 'kept-elsewhere sample',
            intervalMs: 60_000,
            firstRunAfterMs: 5_000,
            run: () => {
              const keys = runtime.dashboard().pools.keys;
              return sampleKeptElsewhere(pool, keys.storeFigures ?? new Map(), keys.staleElsewhere);
            },
            onError: failed,
          }),
        ]
      : []),
    // The overview's alert starts and ends (one instance a minute records them).
    periodicTask({
      name: 'alert history',
      intervalMs: 60_000,
      firstRunAfterMs: 10_000,
      run: () =>
        recordAlertHistory(pool, {
          thresholds,
          sweepIntervalSeconds: environment.SWEEP_INTERVAL_SECONDS,
          databaseMemoryBytes: environment.DATABASE_MEMORY_BYTES,
          ...(staleElsewhere ? { staleElsewhere: () => staleElsewhere()?.() ?? Promise.resolve([]) } : {}),
        }),
      onError: failed,
    }),
  ];
  for (const task of tasks) task.start();
  const traffic = environment.DEMO_TRAFFIC === true ? startTraffic(environment.PORT, environment.HOST, pool, store, policies) : null;
  logEvent('info', 'services started', { layout, demoTraffic: environment.DEMO_TRAFFIC === true });
  return {
    services: { ownerPool: pool, store, policies, quota, sweeper, recorder, prometheus, metricsToken: environment.METRICS_TOKEN, alertThresholds: thresholds, sweepIntervalSeconds: environment.SWEEP_INTERVAL_SECONDS, databaseMemoryBytes: environment.DATABASE_MEMORY_BYTES, demo },
    storePool,
    replicaLag,
    async stopDuties() {
      traffic?.stop();
      await Promise.allSettled([sweeper?.stop(), ...tasks.map((task) => task.stop())]);
      await retrysafe.stop().catch((error: unknown) => logEvent('error', 'final metrics flush failed', { error: describeError(error) }));
    },
  };
}

/** The sweeper's pool (db/topology.ts), or null after logging why it does not run. */
function sessionPoolOrRefusal(runtime: ServerRuntime): pg.Pool | null {
  try {
    return runtime.sessionPool('The sweeper');
  } catch (error) {
    if (!(error instanceof SessionDutyRefused)) throw error;
    logEvent('error', `${error.message} (keys past their retention stay until it runs)`);
    return null;
  }
}

function startTraffic(port: number, host: string, pool: pg.Pool, store: IdempotencyStore, policies: ServicePolicies): TrafficGenerator {
  let lastLogged = 0;
  const traffic = new TrafficGenerator({
    baseUrl: `http://${host === '::1' ? '[::1]' : '127.0.0.1'}:${port}`,
    pool,
    store,
    policyFor: (endpoint) => policies.policyFor(endpoint),
    onError: (error) => {
      // At most one line a minute: the generator keeps going whatever a request does.
      if (Date.now() - lastLogged < 60_000) return;
      lastLogged = Date.now();
      logEvent('error', 'demo traffic request failed', { error: describeError(error) });
    },
  });
  // The server starts listening once boot is done; begin a moment later.
  setTimeout(() => {
    traffic.start().then(
      () => logEvent('info', 'demo traffic started'),
      (error: unknown) => logEvent('error', 'demo traffic did not start', { error: describeError(error) }),
    );
  }, 3_000).unref();
  return traffic;
}
