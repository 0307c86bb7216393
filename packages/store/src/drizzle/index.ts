/**
 * The store's tables (Postgres schema `retrysafe`) as Drizzle table definitions, for a service
 * on Drizzle ORM that queries them typed (its keys, flow metrics, policies, evidence). The
 * package's migrations create these tables: this entry point describes them and creates
 * nothing. It needs `drizzle-orm` (an optional peer dependency); the rest of the package does not.
 *
 * The Retrysafe repository's drizzle-kit generates the package's migrations from this module.
 *
 * @module @retrysafe/store/drizzle
 */
export { retrysafe } from './schema.js';
export * from './idempotency-keys.js';
export * from './key-usage.js';
export * from './key-attempts.js';
export * from './unrecorded-completions.js';
export * from './reconcile.js';
export * from './retention.js';
export * from './metrics.js';
export * from './principals.js';
export * from './service-starts.js';
