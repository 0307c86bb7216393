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
// live-key quota. The Retrysafe server runs the shared duties once for everyone: the sweeper,
// stale-claim release, store statistics, metric roll-ups, alerts and the dashboard.
import pg from 'pg';
import { ignoreFlow, type FlowObserver } from './events.js';
import { LiveKeyQuota, type QuotaOptions } from './quota.js';
import { FlowRecorder } from './recorder.js';
import { ResponseKeyRing, type ResponseKey } from './response-codec.js';
import { parseResponseKeys } from './response-keys.js';
import { STORE_POOL_SETTINGS } from './statements.js';
import { checkStoreSchema } from './schema.js';
import { checkServiceName, IdempotencyStore, type StoreOptions } from './store.js';
import { ServicePolicies } from './service-policies.js';
import { namePrincipal } from './principal-names.js';
import type { EndpointPolicy } from './policy.js';

export interface RetrysafeOptions {
  /**
   * This service's name (e.g. "orders"): its keys, policies, metrics and evidence carry it, so
   * services sharing a database never share a key, and the dashboard shows it. 1 to 63 of
   * a-z, 0-9, '.', '_', '-'. Every instance of one service uses the same name.
   */
  service: string;
  /** A pool for the store; it should be opened with STORE_POOL_SETTINGS (see statements.ts). Not closed by stop(). */
  pool?: pg.Pool;
  /** Or a connection string: the store opens (and stop() closes) its own pool. */
  connectionString?: string;
  /** Pool size when the store opens its own pool (default 10). */
  maxConnections?: number;
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
   * the service's endpoint has none yet (audited), then read from there, so the dashboard's
   * retention page reviews and edits them. Routes without a policy of their own use these.
   */
  policies?: Record<string, EndpointPolicy>;
  /** How often the policies are re-read (default 5 s). */
  policyRefreshMs?: number;
  /** Another observer of every claim, beside the recorder (e.g. your own metrics). */
  observer?: FlowObserver;
  /** Told about background failures (flushes) and failures the store outlives; never given request data. */
  onError?: (error: unknown, context: { task: string }) => void;
  /** Told when an attempt finished after its lease was taken over (its work ran twice). */
  onLeaseLost?: StoreOptions['onLeaseLost'];
  /** Told when a failed attempt could not be marked retryable (its key stays in progress until its lease ends); default: onError. */
  onAbandonFailed?: StoreOptions['onAbandonFailed'];
}

export interface Retrysafe {
  service: string;
  store: IdempotencyStore;
  policies: ServicePolicies;
  recorder: FlowRecorder;
  quota: LiveKeyQuota | null;
  pool: pg.Pool;
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

export async function createRetrysafe(options: RetrysafeOptions): Promise<Retrysafe> {
  const secret = typeof options.fingerprintSecret === 'string' ? Buffer.from(options.fingerprintSecret, 'utf8') : options.fingerprintSecret;
  if (secret.length < 16) throw new RangeError('fingerprintSecret must be at least 16 bytes');
  const keys = typeof options.responseKeys === 'string' ? parseResponseKeys(options.responseKeys) : options.responseKeys;
  if (keys.length === 0) throw new RangeError('responseKeys needs at least one key');
  if (!options.pool && !options.connectionString) throw new TypeError('createRetrysafe needs a pool or a connectionString');
  const service = checkServiceName(options.service);
  const report = options.onError ?? (() => undefined);

  const ownsPool = !options.pool;
  const pool =
    options.pool ??
    new pg.Pool({
      connectionString: options.connectionString,
      max: options.maxConnections ?? 10,
      connectionTimeoutMillis: 5_000,
      application_name: 'retrysafe-store',
      ...STORE_POOL_SETTINGS,
    });
  if (ownsPool) pool.on('error', (error) => report(error, { task: 'idle connection' }));
  try {
    await checkStoreSchema(pool);
    const layout = options.layout ?? (await detectLayout(pool));
    const policies = new ServicePolicies(pool, {
      service,
      defaults: options.policies,
      refreshMs: options.policyRefreshMs,
      onError: (error) => report(error, { task: 'policy refresh' }),
    });
    await policies.start();
    const recorder = new FlowRecorder(pool, { flushIntervalMs: options.metricsFlushIntervalMs, onError: (error) => report(error, { task: 'flow metrics flush' }) });
    const quota = options.quota === false ? null : new LiveKeyQuota(pool, { ...options.quota, service, onError: (error) => report(error, { task: 'key quota flush' }) });
    const extra = options.observer ?? ignoreFlow;
    const store = new IdempotencyStore({
      pool,
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
      onLeaseLost: options.onLeaseLost,
      onAbandonFailed: options.onAbandonFailed ?? ((error) => report(error, { task: 'mark a failed attempt retryable' })),
    });
    recorder.start();
    quota?.start();
    let stopping: Promise<void> | null = null;
    return {
      service,
      store,
      policies,
      recorder,
      quota,
      pool,
      namePrincipal: (principalId, name) => namePrincipal(pool, principalId, name),
      stop: () =>
        (stopping ??= (async () => {
          const results = await Promise.allSettled([recorder.stop(), quota?.stop(), policies.stop()]);
          if (ownsPool) await pool.end();
          const failed = results.find((result): result is PromiseRejectedResult => result.status === 'rejected');
          if (failed) throw failed.reason;
        })()),
    };
  } catch (error) {
    if (ownsPool) await pool.end().catch(() => undefined);
    throw error;
  }
}
