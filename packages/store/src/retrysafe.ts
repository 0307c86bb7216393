// The composition root for a service that puts its endpoints behind the store:
//
//   const retrysafe = await createRetrysafe({
//     connectionString: process.env.DATABASE_URL,
//     service: 'orders',
//     fingerprintSecret: process.env.IDEMPOTENCY_SECRET,
//     responseKeys: process.env.RESPONSE_ENCRYPTION_KEYS,
//   });
//   app.post('/orders', express.json(), idempotent(retrysafe.store, { ... }));
//   process.on('SIGTERM', () => void retrysafe.stop());
//
// A service runs the request path's duties: the store, the flow recorder (claim outcomes and
// latency, flushed to Postgres every few seconds, summed there across instances) and the
// live-key quota, and records its start (service_starts, for the overview). The Retrysafe server runs the shared duties once for everyone: the sweeper,
// stale-claim release, store statistics, metric roll-ups, alerts and the dashboard.
import pg from 'pg';
import { ignoreFlow, type FlowObserver } from './events.js';
import { LiveKeyQuota, type QuotaOptions } from './quota.js';
import { FlowRecorder } from './recorder.js';
import { ResponseKeyRing, type ResponseKey } from './response-codec.js';
import { parseResponseKeys } from './response-keys.js';
import { storePoolSettings, withoutNames, type KeyIdentity, type PoolerMode, type Queryable } from './statements.js';
import type { IdempotencyBackend } from './backend.js';
import { checkStoreSchema } from './schema.js';
import { plannerSettingsInPlace, poolerTracksPreparedStatements, UNTRACKED_PREPARED_STATEMENTS } from './backend.js';
import { checkServiceName, IdempotencyStore, type StoreOptions } from './store.js';
import { ServicePolicies } from './service-policies.js';
import { namePrincipal } from './principal-names.js';
import { recordServiceStart, thisStart } from './service-starts.js';
import type { EndpointPolicy } from './policy.js';
import type { RedisCommands, RedisMemoryAlert, RedisMemoryStatus, RedisMemoryWatch } from './redis-memory.js';
import { parseReconcileOptions, RedisReconciler, type ReconcileOptions, type ReconcileRun } from './redis-reconcile.js';
import { periodicTask } from './periodic.js';

/**
 * Key records in Redis instead of Postgres (`@retrysafe/store/redis`; needs the `redis` package,
 * an optional peer dependency). Claim-first only. Postgres (`connectionString`/`pool`) still
 * holds policies, flow metrics, quota and evidence.
 */
export interface RedisOptions {
  /** redis:// or rediss:// URL of a standalone Redis (or a primary). Either this or `cluster`. */
  url?: string;
  /**
   * A Redis Cluster: `nodes` are some or all of its nodes (`{ url }` each; the client discovers the
   * rest and follows MOVED/ASK). Either this or `url`. The eviction watch reads every master.
   */
  cluster?: { nodes: readonly { url: string }[] };
  /**
   * Replicas that must acknowledge a claim (WAIT) before the work runs; short of them in
   * waitTimeoutMs the request is answered 503 and the work does not run (default 0: no WAIT).
   * Narrows, does not close, the loss of an acknowledged claim on failover (docs/redis.md).
   */
  waitReplicas?: number;
  /** How long a claim waits for waitReplicas (default 100 ms). */
  waitTimeoutMs?: number;
  /**
   * 'refuse' (default): createRetrysafe refuses a Redis whose maxmemory-policy is allkeys-*
   * (EvictingPolicyError, naming the setting). 'alert': it starts, with a critical alert.
   */
  evictingPolicy?: 'refuse' | 'alert';
  /** How often maxmemory, used_memory and evicted_keys are read again (default a minute). */
  memoryCheckIntervalMs?: number;
  /** Told each critical alert: an evicting policy (with 'alert'), keys evicted, memory over 90% of maxmemory. Default: onError. */
  onAlert?: (alert: RedisMemoryAlert) => void;
  /**
   * Dual-write reconciliation: the claim is in Redis, the effect in your database, and no
   * transaction spans both. Give `effectExists` and one instance of the service at a time (an
   * advisory lock in Postgres) samples the records every `intervalMs`, at most `budget` a run,
   * and keeps in Postgres the completed keys whose effect is missing and the claims past their
   * lease (with whether their effect exists), for the Retrysafe server's dashboard and
   * /api/metrics. Metadata only. Errors of effectExists are counted and told to onError. See
   * docs/redis.md, "Reconciliation".
   */
  reconcile?: ReconcileOptions;
}

/** The Redis side of a service whose key records live there. */
export interface RetrysafeRedis {
  /** The last reading of its memory and evictions, and the alerts it raised. */
  status(): RedisMemoryStatus;
  /** Reads the figures now (as the watch does every interval). */
  check(): Promise<RedisMemoryStatus>;
  /** The last reading as Prometheus text, for the service's own /metrics. */
  prometheusText(): string;
  /**
   * Runs the reconciler now (after a run in flight, never beside it) and gives what the run did;
   * null without `reconcile`, or when the run failed (told to onError, task 'redis reconcile').
   */
  reconcileNow(): Promise<ReconcileRun | null>;
}

/**
 * The MySQL backend's types, declared by `@retrysafe/store/mysql` (a module augmentation: mysql2's
 * pool for `mysql: { pool }`, mysql2's connection as the work's `context.db`). The root entry's
 * declarations never name mysql2, so an adopter without it installed type-checks with
 * skipLibCheck off. Any import from '@retrysafe/store/mysql' (a type import is enough) brings
 * them in; without one, `mysql: { pool }` takes any object and `context.db` is unknown.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type -- filled by mysql.ts's augmentation
export interface MysqlBackendTypes {}
/** createRetrysafe's `mysql` option: `{ uri, maxConnections? }` or `{ pool }` (a mysql2/promise pool): MysqlOptions of `@retrysafe/store/mysql`. */
export type RetrysafeMysqlOptions = MysqlBackendTypes extends { options: infer Options } ? Options : { uri: string; maxConnections?: number } | { pool: object };
/** The work's `context.db` with `mysql`: MysqlQueryable of `@retrysafe/store/mysql` (mysql2's pool or connection). */
export type RetrysafeMysqlDb = MysqlBackendTypes extends { db: infer Db } ? Db : unknown;

export interface RetrysafeOptions {
  /**
   * This service's name (e.g. "orders"): its keys, policies, metrics and evidence carry it, so
   * services sharing a database never share a key, and the dashboard shows it. 1 to 63 of
   * a-z, 0-9, '.', '_', '-'. Every instance of one service uses the same name.
   */
  service: string;
  /** A pool for the store; it should be opened with STORE_POOL_SETTINGS (with `pooler`, STORE_POOLER_POOL_SETTINGS; see statements.ts). Not closed by stop(). */
  pool?: pg.Pool;
  /** Or a connection string: the store opens (and stop() closes) its own pool. */
  connectionString?: string;
  /** Pool size when the store opens its own pool (default 10). */
  maxConnections?: number;
  /**
   * `transaction`: the connection goes through a transaction-mode pooler (PgBouncer 1.18 and
   * later, pool_mode = transaction): no startup parameters, no named statements, no session
   * state between transactions. The same behaviour and contract as direct (the default).
   * The settings the store's plans rely on (enable_seqscan = off) go in each of its
   * transactions as a SET LOCAL, a statement outside a request's transaction running in one of
   * its own (pipelined: one round trip, but three statements for one); where the store's role or
   * database has them already (ALTER ROLE ... SET enable_seqscan = off, read at start), its
   * statements go alone.
   * `transaction-prepared`: the same, through a pooler that tracks protocol-level named
   * statements (PgBouncer 1.21 and later with max_prepared_statements above 0, the default from
   * 1.24): the store's statements stay named, each parsed and planned once per server connection
   * as direct, rather than at each execution. Checked at start (poolerTracksPreparedStatements):
   * a pooler that passes names through is refused with an error saying what to set.
   */
  pooler?: PoolerMode;
  /**
   * Key records in MySQL/MariaDB (`@retrysafe/store/mysql`, mysql2 installed beside the package):
   * a URI (mysql://user:password@host:3306/database; its pool is opened here and closed by stop())
   * or a mysql2/promise pool, on the service's own database, migrated with `npx retrysafe migrate
   * --mysql <uri>`. Both execution modes; a transactional endpoint's work gets the mysql2
   * connection of the claim's transaction as `context.db`. Policies, flow metrics, the quota and
   * evidence stay in Postgres (`pool` or `connectionString`, still required).
   */
  mysql?: RetrysafeMysqlOptions;
  /** The key of request fingerprints (HMAC): IDEMPOTENCY_SECRET. At least 16 bytes. */
  fingerprintSecret: string | Buffer;
  /** Stored-response encryption keys: RESPONSE_ENCRYPTION_KEYS' `id:base64key,...` or parsed; the first encrypts. */
  responseKeys: string | ResponseKey[];
  /** The key table's layout; detected from the database when absent. */
  layout?: 'plain' | 'partitioned';
  /** How often flow metrics are flushed (default 5 s). */
  metricsFlushIntervalMs?: number;
  /** Live-key quota options, or false to enforce no quota. */
  quota?: Omit<QuotaOptions, 'service'> | false;
  /**
   * This service's default policies by endpoint ("POST /orders"): created in the database where
   * the service's endpoint has none yet (with their first history entry), then read from there, so the dashboard's
   * retention page reviews and edits them. Routes without a policy of their own use these.
   */
  policies?: Record<string, EndpointPolicy>;
  /** How often the policies are re-read (default 5 s). */
  policyRefreshMs?: number;
  /** Another observer of every claim, beside the recorder (e.g. your own metrics). */
  observer?: FlowObserver;
  /**
   * Told about background failures (flushes) and failures the store outlives; never given
   * request data. `key`: the scoped key of an attempt whose work ran and whose response could not
   * be recorded (task 'record a completed attempt'; the store's unrecordedCompletions counts them,
   * and the recorder's flush writes them to unrecorded_completions for the dashboard's overview).
   */
  onError?: (error: unknown, context: { task: string; key?: KeyIdentity }) => void;
  /** Told when an attempt finished after its lease was taken over (its work ran twice). */
  onLeaseLost?: StoreOptions['onLeaseLost'];
  /** Told when a failed attempt could not be marked retryable (its key stays in progress until its lease ends); default: onError. */
  onAbandonFailed?: StoreOptions['onAbandonFailed'];
  /** Key records in Redis (claim-first only): see RedisOptions. */
  redis?: RedisOptions;
}

export interface Retrysafe<Db = Queryable> {
  service: string;
  /** Postgres: the work's `context.db` is pg's; with `mysql`, mysql2's (MysqlQueryable). */
  store: IdempotencyStore<Db>;
  policies: ServicePolicies;
  recorder: FlowRecorder;
  quota: LiveKeyQuota | null;
  pool: pg.Pool;
  /** With `redis`: its memory and eviction watch; null otherwise. */
  redis: RetrysafeRedis | null;
  /**
   * Gives a principal the display name the dashboard shows (its principals table, the key
   * search by name), e.g. when an account is created or renamed. Shared by every service.
   */
  namePrincipal(principalId: string, name: string): Promise<void>;
  /** Flushes the recorder and the quota, stops their timers, closes the pool if it opened it. */
  stop(): Promise<void>;
}

/** Reads the key table's layout. */
export async function detectLayout(db: Pick<pg.Pool, 'query'>): Promise<'plain' | 'partitioned'> {
  const { rows } = await db.query<{ relkind: string | null }>("SELECT (SELECT relkind FROM pg_class WHERE oid = to_regclass('retrysafe.idempotency_keys'))::text AS relkind");
  const relkind = rows[0]?.relkind;
  if (!relkind) throw new Error("The idempotency_keys table does not exist: migrate the database first (npx retrysafe migrate, or the Retrysafe server's npm run cli -- migrate)");
  return relkind === 'p' ? 'partitioned' : 'plain';
}

/** Key records in MySQL/MariaDB: the store's work gets mysql2's pool or transaction connection. */
export async function createRetrysafe(options: RetrysafeOptions & { mysql: RetrysafeMysqlOptions }): Promise<Retrysafe<RetrysafeMysqlDb>>;
export async function createRetrysafe(options: RetrysafeOptions & { mysql?: undefined }): Promise<Retrysafe>;
export async function createRetrysafe(options: RetrysafeOptions): Promise<Retrysafe | Retrysafe<RetrysafeMysqlDb>> {
  if (options.mysql && options.redis) throw new TypeError('createRetrysafe takes mysql or redis for key records, not both');
  if (options.mysql) {
    // Loaded only here: mysql2 is an optional peer dependency.
    const { openMysqlBackend } = await import('./mysql.js');
    const opened = await openMysqlBackend(options.mysql);
    try {
      return await compose<RetrysafeMysqlDb>(options, opened.backend, opened.close);
    } catch (error) {
      await opened.close().catch(() => undefined);
      throw error;
    }
  }
  return compose<Queryable>(options, undefined, () => Promise.resolve());
}

/** The composition: Postgres for policies, metrics, quota and evidence; the keys in `backend` (default: Postgres's own). */
async function compose<Db>(options: RetrysafeOptions, backend: IdempotencyBackend<Db> | undefined, closeBackend: () => Promise<void>): Promise<Retrysafe<Db>> {
  const secret = typeof options.fingerprintSecret === 'string' ? Buffer.from(options.fingerprintSecret, 'utf8') : options.fingerprintSecret;
  if (secret.length < 16) throw new RangeError('fingerprintSecret must be at least 16 bytes');
  const keys = typeof options.responseKeys === 'string' ? parseResponseKeys(options.responseKeys) : options.responseKeys;
  if (keys.length === 0) throw new RangeError('responseKeys needs at least one key');
  if (!options.pool && !options.connectionString) throw new TypeError('createRetrysafe needs a pool or a connectionString');
  const service = checkServiceName(options.service);
  const report = options.onError ?? (() => undefined);
  // Checked before anything connects: a wrong option fails createRetrysafe at once.
  if (options.redis?.reconcile) parseReconcileOptions(options.redis.reconcile);

  const ownsPool = !options.pool;
  const pool =
    options.pool ??
    new pg.Pool({
      connectionString: options.connectionString,
      max: options.maxConnections ?? 10,
      connectionTimeoutMillis: 5_000,
      application_name: 'retrysafe-store',
      ...storePoolSettings(options.pooler),
    });
  if (ownsPool) pool.on('error', (error) => report(error, { task: 'idle connection' }));
  // Through a pooler that cannot carry named statements the background duties' statements go
  // unnamed too (the store's own: backend.ts).
  const db = options.pooler === 'transaction' ? withoutNames(pool) : pool;
  let redis: { backend: IdempotencyBackend; watch: RedisMemoryWatch; commands: RedisCommands; close(): Promise<void> } | null = null;
  try {
    await checkStoreSchema(pool);
    if (options.pooler === 'transaction-prepared' && !(await poolerTracksPreparedStatements(pool))) {
      throw new Error(`pooler: 'transaction-prepared' refused: the connection ${UNTRACKED_PREPARED_STATEMENTS}`);
    }
    // Redis's work gets the Postgres pool as its context.db (createRetrysafe refuses redis beside mysql).
    if (options.redis) redis = await openRedis(options.redis, db, report);
    const keyBackend = backend ?? (redis?.backend as IdempotencyBackend<Db> | undefined);
    const layout = keyBackend ? undefined : (options.layout ?? (await detectLayout(pool)));
    // Through a pooler: does every server connection have the planner settings already (the role's or the database's)?
    const settingsInPlace = options.pooler ? await plannerSettingsInPlace(db) : false;
    const policies = new ServicePolicies(db, {
      service,
      defaults: options.policies,
      refreshMs: options.policyRefreshMs,
      onError: (error) => report(error, { task: 'policy refresh' }),
    });
    await policies.start();
    const recorder = new FlowRecorder(db, { flushIntervalMs: options.metricsFlushIntervalMs, onError: (error) => report(error, { task: 'flow metrics flush' }) });
    const quota = options.quota === false ? null : new LiveKeyQuota(db, { ...options.quota, service, onError: (error) => report(error, { task: 'key quota flush' }) });
    const extra = options.observer ?? ignoreFlow;
    const store = new IdempotencyStore<Db>({
      pool,
      backend: keyBackend,
      service,
      layout,
      fingerprintSecret: secret,
      keyRing: new ResponseKeyRing(keys),
      quota: quota ?? undefined,
      policies,
      observer: {
        record: (event) => {
          recorder.record(event);
          extra.record(event);
        },
      },
      pooler: options.pooler,
      plannerSettingsInPlace: settingsInPlace,
      onLeaseLost: options.onLeaseLost,
      // Reported with its key, and kept for the dashboard (the recorder's next flush).
      onCompletionFailed: (error, attempt) => {
        recorder.completionUnrecorded(attempt, error);
        report(error, { task: 'record a completed attempt', key: { principalId: attempt.principalId, service: attempt.service, scope: attempt.scope, key: attempt.key } });
      },
      onAbandonFailed: options.onAbandonFailed ?? ((error) => report(error, { task: 'mark a failed attempt retryable' })),
    });
    recorder.start();
    quota?.start();
    // Dual-write reconciliation (redis.reconcile): one instance at a time, by its advisory lock.
    let lastRun: ReconcileRun | null = null;
    const reconciler = redis && options.redis?.reconcile ? new RedisReconciler(pool, redis.commands, service, options.redis.reconcile, (error, task) => report(error, { task })) : null;
    const reconcile = reconciler
      ? periodicTask({
          name: 'redis reconcile',
          intervalMs: reconciler.intervalMs,
          run: async () => {
            lastRun = null;
            lastRun = await reconciler.runOnce();
          },
          onError: (error, task) => report(error, { task }),
        })
      : null;
    reconcile?.start();
    // This start, for the dashboard's overview: one INSERT, not awaited (the start does not wait
    // on it, and a failure is told to onError, never refusing the start); stop() waits for it.
    const startRecorded = recordServiceStart(db, thisStart(service)).catch((error: unknown) => report(error, { task: 'service start record' }));
    let stopping: Promise<void> | null = null;
    return {
      service,
      store,
      policies,
      recorder,
      quota,
      pool,
      redis:
        redis &&
        redisSide(redis.watch, service, async () => {
          if (!reconcile) return null;
          await reconcile.runNow();
          return lastRun;
        }),
      namePrincipal: (principalId, name) => namePrincipal(db, principalId, name),
      stop: () =>
        (stopping ??= (async () => {
          const results = await Promise.allSettled([startRecorded, reconcile?.stop(), recorder.stop(), quota?.stop(), policies.stop(), redis?.watch.stop()]);
          // Flushed first (the quota's and the recorder's last writes), then the connections.
          results.push(...(await Promise.allSettled([closeBackend(), redis?.close()])));
          if (ownsPool) await pool.end();
          const failed = results.find((result): result is PromiseRejectedResult => result.status === 'rejected');
          if (failed) throw failed.reason;
        })()),
    };
  } catch (error) {
    await redis?.close().catch(() => undefined);
    if (ownsPool) await pool.end().catch(() => undefined);
    throw error;
  }
}

function redisSide(watch: RedisMemoryWatch, service: string, reconcileNow: () => Promise<ReconcileRun | null>): RetrysafeRedis {
  return { status: () => watch.status(), check: () => watch.check(), prometheusText: () => watch.prometheusText(service), reconcileNow };
}

/**
 * Connects to Redis (the `redis` package, loaded only here), starts the memory watch (which
 * refuses an evicting policy) and builds the backend, its work given the Postgres `db`.
 */
async function openRedis(
  options: RedisOptions,
  db: Pick<pg.Pool, 'query'>,
  report: (error: unknown, context: { task: string }) => void,
): Promise<{ backend: IdempotencyBackend; watch: RedisMemoryWatch; commands: RedisCommands; close(): Promise<void> }> {
  let module: typeof import('./redis.js');
  try {
    module = await import('./redis.js');
  } catch (error) {
    throw new Error("createRetrysafe({ redis }) needs the 'redis' package (node-redis 6 or later): npm install redis", { cause: error });
  }
  if ((options.url === undefined) === (options.cluster === undefined)) throw new TypeError('createRetrysafe({ redis }) takes either url or cluster: { nodes }');
  const onError = (error: unknown) => report(error, { task: 'redis connection' });
  const connection = options.cluster ? await module.connectRedisCluster(options.cluster.nodes, { onError }) : await module.connectRedis(options.url ?? '', { onError });
  try {
    const watch = new module.RedisMemoryWatch(connection.commands, {
      evictingPolicy: options.evictingPolicy,
      intervalMs: options.memoryCheckIntervalMs,
      onAlert: options.onAlert ?? ((alert) => report(new Error(alert.message), { task: `redis ${alert.kind} alert` })),
      onError: (error) => report(error, { task: 'redis memory watch' }),
    });
    await watch.start();
    return {
      backend: new module.RedisBackend(connection.commands, {
        db,
        waitReplicas: options.waitReplicas,
        waitTimeoutMs: options.waitTimeoutMs,
        onWaitShortfall: (operation, acknowledged) => report(new Error(`Redis WAIT: ${acknowledged} of ${options.waitReplicas ?? 0} replicas acknowledged a ${operation} in time`), { task: 'redis replication' }),
      }),
      watch,
      commands: connection.commands,
      close: async () => {
        await watch.stop();
        await connection.close();
      },
    };
  } catch (error) {
    await connection.close().catch(() => undefined);
    throw error;
  }
}
