// Process-wide services of the Next server, booted once: pools, the store (in the
// layout the database has), policies, the quota counters, the sweeper, the shared duties
// (roll-ups, store statistics, alert history) and the demo API. (createRetrysafe records this start.)
// Kept on globalThis because Next may evaluate this module in more than one bundle.
// Booted by instrumentation.ts when the server starts; route handlers await it through
// runtime.ts.
import { connectionBudget } from '@/server/connection-budget';
import type pg from 'pg';
import { createPool } from '@/db/client';
import { detectStoreLayout } from '@/db/migrate';
import { SessionDutyRefused, sessionUrl } from '@/db/topology';
import { readEnvironment, requireDatabaseUrl, requireStoreSecrets } from '@/server/config';
import { createDemoApi, type DemoApi } from '@/server/demo/api';
import { DEMO_SERVICE, defaultPolicies } from '@/server/demo/policies';
import { FakeProcessor } from '@/server/demo/processor';
import { TrafficGenerator } from '@/server/demo/traffic';
import { createRetrysafe, periodicTask, type FlowRecorder, type IdempotencyStore, type LiveKeyQuota, type PeriodicTask, type ServicePolicies } from '@retrysafe/store';
import { storePoolSettings } from '@retrysafe/store/postgres';
import { Sweeper } from '@/server/retention/sweeper';
import { thresholdsWith, type AlertThresholds } from '@/server/metrics/alerts';
import { createPrometheusMetrics, type PrometheusMetrics } from '@/server/metrics/prometheus';
import { rollUpFlowMetrics } from '@/server/metrics/rollup';
import { pruneThrottle } from '@/server/auth/throttle';
import { sampleStoreStats } from '@/server/metrics/sampler';
import { recordAlertHistory } from '@/server/metrics/alert-history';
import { describeError, logConnectionLost, logger } from '@/server/logging';
import { createReplicaLagReader } from '@/server/dashboard-pools';

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
  /** Flushes the recorder and the quota, stops every periodic task and closes the pools. */
  stop: () => Promise<void>;
}

const slot = Symbol.for('retrysafe.services');
const poolSlot = Symbol.for('retrysafe.ownerPool');
type Holder = typeof globalThis & { [slot]?: Promise<Services>; [poolSlot]?: pg.Pool };

/** The owner pool, available before (and without) a successful boot, e.g. for health checks. */
export function ownerPool(): pg.Pool {
  const holder = globalThis as Holder;
  const environment = readEnvironment();
  holder[poolSlot] ??= createPool(requireDatabaseUrl(environment), {
    applicationName: 'retrysafe-app',
    max: connectionBudget(environment.DATABASE_CONNECTIONS).app,
    onConnectionLost: logConnectionLost,
    ...requestPathTimeouts(environment.DATABASE_STATEMENT_TIMEOUT_MS),
  });
  return holder[poolSlot];
}

/**
 * The request path never waits unboundedly on the database: 2 s for a connection, the
 * configured statement timeout on the server, and 2 s more on the client (a server it cannot
 * reach answers nothing). Each failure answers 503 with Retry-After (the package's problemFor).
 */
function requestPathTimeouts(statementTimeoutMs: number): { connectionTimeoutMillis: number; statementTimeoutMs: number; queryTimeoutMs: number } {
  return { connectionTimeoutMillis: 2_000, statementTimeoutMs, queryTimeoutMs: statementTimeoutMs + 2_000 };
}

export function logEvent(level: 'info' | 'error', message: string, fields: Record<string, unknown> = {}): void {
  // Only identifiers and counts: nothing from a request or a stored response is ever logged
  // (and the logger redacts keys, credentials and bodies should one slip in).
  logger[level](fields, message);
}

async function bootServices(): Promise<Services> {
  const environment = readEnvironment();
  const secrets = requireStoreSecrets(environment);
  const pool = ownerPool();
  const layout = await detectStoreLayout(pool);
  // The store's own connections, with the session settings its plans rely on (statements.ts);
  // a transactional endpoint's work runs on them too, inside the claim's transaction.
  const storePool = createPool(requireDatabaseUrl(environment), {
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
  // The store's completion counters, read at scrape time (the store is made below).
  const storeCounters: { of?: { unrecordedCompletions: number; completionRetries: number }; recorder?: { droppedAttempts: number } } = {};
  const prometheus = createPrometheusMetrics(pool, thresholds, {
    sweepIntervalSeconds: environment.SWEEP_INTERVAL_SECONDS,
    databaseMemoryBytes: environment.DATABASE_MEMORY_BYTES,
    ...(replicaLag ? { replicaLag: replicaLag.read } : {}),
    completions: () => ({ unrecorded: storeCounters.of?.unrecordedCompletions ?? 0, retried: storeCounters.of?.completionRetries ?? 0 }),
    droppedAttempts: () => storeCounters.recorder?.droppedAttempts ?? 0,
  });
  // The same composition root an adopting service uses; this server adds the shared duties.
  // The demo API is one service among those the dashboard shows; its default policies are
  // created on first start and read from the database from then on.
  const retrysafe = await createRetrysafe({
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
  const { store, recorder, policies } = retrysafe;
  storeCounters.of = store;
  storeCounters.recorder = recorder;
  const quota = retrysafe.quota;
  if (!quota) throw new Error('the dashboard runs with the live-key quota');
  // The sweeper's leader election is a session advisory lock: a direct connection of its own
  // (DATABASE_DIRECT_URL when DATABASE_URL is pooled), or none, said once, while requests run on.
  const sweeperUrl = sessionUrlOrRefusal(environment);
  const sweeperPool = sweeperUrl === null ? null : sweeperUrl === requireDatabaseUrl(environment) ? pool : createPool(sweeperUrl, { applicationName: 'retrysafe-sweeper', max: 2, onConnectionLost: logConnectionLost });
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
    pool: pool,
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
    // The overview's alert starts and ends (one instance a minute records them).
    periodicTask({
      name: 'alert history',
      intervalMs: 60_000,
      firstRunAfterMs: 10_000,
      run: () => recordAlertHistory(pool, { thresholds, sweepIntervalSeconds: environment.SWEEP_INTERVAL_SECONDS, databaseMemoryBytes: environment.DATABASE_MEMORY_BYTES }),
      onError: failed,
    }),
  ];
  for (const task of tasks) task.start();
  const traffic = environment.DEMO_TRAFFIC === true ? startTraffic(environment.PORT, environment.HOST, pool, store, policies) : null;
  logEvent('info', 'services started', { layout, demoTraffic: environment.DEMO_TRAFFIC === true });
  let stopping: Promise<void> | null = null;
  const stop = () =>
    (stopping ??= (async () => {
      traffic?.stop();
      await Promise.allSettled([sweeper?.stop(), ...tasks.map((task) => task.stop())]);
      await retrysafe.stop().catch((error: unknown) => logEvent('error', 'final metrics flush failed', { error: describeError(error) }));
      await Promise.allSettled([storePool.end(), pool.end(), replicaLag?.end(), sweeperPool !== pool ? sweeperPool?.end() : undefined]);
    })());
  return { ownerPool: pool, store, policies, quota, sweeper, recorder, prometheus, metricsToken: environment.METRICS_TOKEN, alertThresholds: thresholds, sweepIntervalSeconds: environment.SWEEP_INTERVAL_SECONDS, databaseMemoryBytes: environment.DATABASE_MEMORY_BYTES, demo, stop };
}

/** The sweeper's connection (db/topology.ts), or null after logging why it does not run. */
function sessionUrlOrRefusal(environment: ReturnType<typeof readEnvironment>): string | null {
  try {
    return sessionUrl(environment, requireDatabaseUrl(environment), 'The sweeper');
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

/** The booted services (booting them on first use). A failed boot is retried on the next call. */
export function services(): Promise<Services> {
  const holder = globalThis as Holder;
  holder[slot] ??= bootServices().catch((error: unknown) => {
    holder[slot] = undefined;
    throw error;
  });
  return holder[slot];
}

/**
 * Stops this process's services if they were booted (flushes the flow recorder and the quota,
 * stops the periodic tasks, closes the pools); the HTTP front calls it on SIGTERM. Shares the
 * globalThis slot, so it reaches the instance Next's bundle booted.
 */
export async function stopServices(): Promise<void> {
  const booted = (globalThis as Holder)[slot];
  if (!booted) return;
  const running = await booted.catch(() => undefined);
  await running?.stop();
}
