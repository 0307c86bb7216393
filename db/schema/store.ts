// The store's tables (schema retrysafe); drizzle-kit reads this file to generate the store's
// migrations into packages/store/migrations (drizzle.config.ts).
export { retrysafe } from './schemas';
export * from './idempotency-keys';
export * from './key-usage';
export * from './key-attempts';
export * from './unrecorded-completions';
export * from './reconcile';
export * from './retention';
export * from './metrics';
export * from './principals';
export * from './service-starts';
