// One zod-validated view of the environment. Empty variables count as unset, so
// `DATABASE_URL= npm start` means "use the default", not "connect to ''".
import { connectionBudget, DEFAULT_CONNECTIONS, MIN_CONNECTIONS } from './connection-budget';
import { z } from 'zod';
import { parseResponseKeys } from '@retrysafe/store';
import { alertThresholdOverrides } from './metrics/alerts';
import { trustProxySchema } from './client-address';
import { ConfigurationError, databaseVariables, readVariables } from '../db/settings';
import { keyBackendOverlap, keyBackendVariables } from './key-backend-settings';

// Defined beside the database code that reads them (db/ is below server/).
export { ConfigurationError };

/** `id:base64key` entries, comma-separated; each key 32 bytes (AES-256). The first one encrypts. */
const encryptionKeys = z.string().transform((value, context) => {
  try {
    return parseResponseKeys(value);
  } catch (error) {
    context.addIssue({ code: 'custom', message: error instanceof Error ? error.message : 'is not a list of id:base64key' });
    return z.NEVER;
  }
});

const flag = z.enum(['0', '1']).transform((value) => value === '1');

const environmentSchema = z.object({
  /** DATABASE_URL, DASHBOARD_DATABASE_URL, DASHBOARD_READ_URL, DATABASE_POOLER, DATABASE_DIRECT_URL (db/settings.ts). */
  ...databaseVariables,
  /** DASHBOARD_KEYS_REDIS, DASHBOARD_KEYS_MYSQL: services whose key records the dashboard reads outside Postgres (server/key-backend-settings.ts). */
  ...keyBackendVariables,
  PORT: z.coerce.number().int().min(1).max(65535).default(3000),
  /** Interface the server binds; loopback by default so a demo is not exposed to the network. */
  HOST: z.string().min(1).default('127.0.0.1'),
  IDEMPOTENCY_SECRET: z.string().min(32, 'must be at least 32 characters').optional(),
  RESPONSE_ENCRYPTION_KEYS: encryptionKeys.optional(),
  DEMO_TRAFFIC: flag.optional(),
  /** Set by `npm start` for the server it starts on embedded Postgres (loopback names are then allowed hosts). */
  RETRYSAFE_EMBEDDED: flag.optional(),
  METRICS_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
  /** Signs operator session cookies. */
  AUTH_SECRET: z.string().min(32, 'must be at least 32 characters').optional(),
  /** Sessions end this long after sign-in, however much they are used (on top of the 8 h idle timeout). */
  SESSION_ABSOLUTE_HOURS: z.coerce.number().min(0.1).max(720).default(8),
  /** Proxies in front of the server whose X-Forwarded-* headers hold: a hop count or addresses/ranges (default: none). */
  TRUST_PROXY: trustProxySchema.default({ kind: 'none' }),
  /** Where operators reach the dashboard (an https URL makes the session cookie Secure). */
  PUBLIC_URL: z.url({ protocol: /^https?$/ }).optional(),
  /** The first admin, created when no operator exists. */
  ADMIN_EMAIL: z.email().optional(),
  ADMIN_PASSWORD: z.string().min(12, 'must be at least 12 characters').max(128).optional(),
  /** Simulated external processor behind POST /api/v1/refunds. */
  DEMO_PROCESSOR_LATENCY_MS: z.coerce.number().int().min(0).max(60_000).default(40),
  DEMO_PROCESSOR_FAILURE_RATE: z.coerce.number().min(0).max(1).default(0.02),
  /** The key store's layout, read when migrating a new database (install time). */
  STORE_LAYOUT: z.enum(['plain', 'partitioned']).default('plain'),
  /** How often each instance tries to sweep (only one sweeps at a time across instances). */
  SWEEP_INTERVAL_SECONDS: z.coerce.number().int().min(1).max(86_400).default(60),
  /** How often each instance adds its flow counts to the shared buckets (a crash loses at most this much). */
  METRICS_FLUSH_SECONDS: z.coerce.number().int().min(1).max(300).default(5),
  /** Minute buckets are kept this long, then rolled up into hour buckets. */
  METRICS_MINUTE_RETENTION_HOURS: z.coerce.number().int().min(1).max(24 * 14).default(48),
  /** Hour buckets are kept this long. */
  METRICS_HOUR_RETENTION_DAYS: z.coerce.number().int().min(1).max(3_650).default(35),
  /** Overrides of the alert thresholds, as a JSON object (see server/metrics/alerts.ts). */
  ALERT_THRESHOLDS: z
    .string()
    .transform((value, context) => {
      try {
        return JSON.parse(value) as unknown;
      } catch {
        context.addIssue({ code: 'custom', message: 'must be a JSON object' });
        return z.NEVER;
      }
    })
    .pipe(alertThresholdOverrides)
    .optional(),
  /**
   * Longest a statement of the app's pools may run on the server (statement_timeout); the client
   * gives up 2 s later (query_timeout), which also ends a wait on a database it cannot reach.
   * Either answers 503 with Retry-After. A pooled connection is waited for at most 2 s.
   */
  DATABASE_STATEMENT_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).default(5_000),
  /**
   * This instance's connections on the primary (or the pooler in front of it), split between
   * its pools (server/connection-budget.ts: store 20, app 10, dashboard 10, sign-in 5 of 45).
   */
  DATABASE_CONNECTIONS: z.coerce.number().int().min(MIN_CONNECTIONS).max(10_000).default(DEFAULT_CONNECTIONS),
  /** The database instance's memory, for the capacity forecast (the unique index against it); unset: shared_buffers alone. */
  DATABASE_MEMORY_BYTES: z.coerce.number().int().positive().optional(),
  /** Stale claims are released by the sweeper once their lease ended this long ago. */
  STALE_CLAIM_RELEASE_AFTER_SECONDS: z.coerce.number().int().min(0).max(86_400).default(900),
}).superRefine((environment, context) => {
  const overlap = keyBackendOverlap(environment);
  if (overlap) context.addIssue({ code: 'custom', path: ['DASHBOARD_KEYS_MYSQL'], message: overlap });
});

export type Environment = z.infer<typeof environmentSchema>;
export type EncryptionKey = NonNullable<Environment['RESPONSE_ENCRYPTION_KEYS']>[number];

export function readEnvironment(source: NodeJS.ProcessEnv = process.env): Environment {
  // Names the variable and the rule, never the value: it may be a secret.
  return readVariables(environmentSchema, source);
}

/** The owner database URL, for code that only runs once the launcher has resolved it. */
export function requireDatabaseUrl(environment: Environment = readEnvironment()): string {
  if (!environment.DATABASE_URL) {
    throw new ConfigurationError('DATABASE_URL is not set: start the app with `npm start`, which provides one');
  }
  return environment.DATABASE_URL;
}

export interface StoreSecrets {
  fingerprintSecret: Buffer;
  encryptionKeys: EncryptionKey[];
}

/** The store's secrets; outside embedded mode both must be configured. */
export function requireStoreSecrets(environment: Environment = readEnvironment()): StoreSecrets {
  const missing = [
    environment.IDEMPOTENCY_SECRET ? undefined : 'IDEMPOTENCY_SECRET',
    environment.RESPONSE_ENCRYPTION_KEYS ? undefined : 'RESPONSE_ENCRYPTION_KEYS',
  ].filter(Boolean);
  if (!environment.IDEMPOTENCY_SECRET || !environment.RESPONSE_ENCRYPTION_KEYS) {
    throw new ConfigurationError(`${missing.join(' and ')} must be set when DATABASE_URL is set`);
  }
  return {
    fingerprintSecret: Buffer.from(environment.IDEMPOTENCY_SECRET, 'utf8'),
    encryptionKeys: environment.RESPONSE_ENCRYPTION_KEYS,
  };
}

export interface DashboardSettings {
  databaseUrl: string;
  /** DASHBOARD_READ_URL as given (server/dashboard-pools.ts settles its credentials); undefined: reads on the primary. */
  readUrl: string | undefined;
  authSecret: string;
  publicUrl: string;
  absoluteSessionSeconds: number;
  /** Services whose key records are read in Redis (DASHBOARD_KEYS_REDIS), service to URL. */
  keysRedis?: Map<string, string> | undefined;
  /** Services whose key records are read in MySQL/MariaDB by a read-only user (DASHBOARD_KEYS_MYSQL), service to URL. */
  keysMysql?: Map<string, string> | undefined;
  /** The dashboard pool's maximum (and its standby pool's): its share of DATABASE_CONNECTIONS. */
  poolMax?: number | undefined;
}

/** The dashboard's restricted database role and session secret; outside embedded mode both must be configured. */
export function requireDashboardSettings(environment: Environment = readEnvironment()): DashboardSettings {
  const missing = [environment.DASHBOARD_DATABASE_URL ? undefined : 'DASHBOARD_DATABASE_URL', environment.AUTH_SECRET ? undefined : 'AUTH_SECRET'].filter(Boolean);
  if (!environment.DASHBOARD_DATABASE_URL || !environment.AUTH_SECRET) {
    throw new ConfigurationError(`${missing.join(' and ')} must be set when DATABASE_URL is set`);
  }
  return {
    databaseUrl: environment.DASHBOARD_DATABASE_URL,
    readUrl: environment.DASHBOARD_READ_URL,
    authSecret: environment.AUTH_SECRET,
    publicUrl: environment.PUBLIC_URL ?? `http://localhost:${environment.PORT}`,
    absoluteSessionSeconds: Math.round(environment.SESSION_ABSOLUTE_HOURS * 3_600),
    keysRedis: environment.DASHBOARD_KEYS_REDIS,
    keysMysql: environment.DASHBOARD_KEYS_MYSQL,
    poolMax: connectionBudget(environment.DATABASE_CONNECTIONS).dashboard,
  };
}
