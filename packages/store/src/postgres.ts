/**
 * The Postgres backend's own surface: statement texts, the pool settings the store's plans rely on, the key reads and policy creation.
 *
 * @module @retrysafe/store/postgres
 */
// The Postgres backend's own surface, for tools that work on the store's tables directly
// (plan tests, benchmarks, the dashboard): statement texts, the session settings the store's
// plans rely on, the statement functions, the dashboard's key reads (PostgresKeyReads), and the
// creation of endpoint policies (one implementation for the package and the Retrysafe server).
export {
  POOLER_TRANSACTION_SETTINGS,
  STORE_POOL_SETTINGS,
  STORE_POOLER_POOL_SETTINGS,
  STORE_SESSION_OPTIONS,
  poolerPartitionedStatements,
  poolerPlainStatements,
  storePoolSettings,
  withoutNames,
  type PoolerMode,
  claimKey,
  completeKey,
  failKey,
  partitionedStatementTexts,
  partitionedStatements,
  plainStatements,
  readKey,
  statementsFor,
  storeStatementTexts,
  takeOverKey,
  type ClaimResult,
  type ClaimValues,
  type CompletionValues,
  type ExistingKey,
  type KeyIdentity,
  type Queryable,
  type StoreStatements,
} from './statements.js';
export { detectLayout } from './retrysafe.js';
export { PostgresBackend, isTransientFailure, plannerSettingsInPlace, poolerTracksPreparedStatements, UNTRACKED_PREPARED_STATEMENTS } from './backend.js';
export { KEY_LIST_SCAN_ROWS, keyReadStatementTexts, PostgresKeyReads, principalKeysStatement } from './key-reads.js';
export { CORRELATION_INDEX_PREDICATE, EXPIRY_INDEX_PREDICATE, PRINCIPAL_CREATED_INDEX_PREDICATE, STALE_LEASE_INDEX_PREDICATE } from './index-predicates.js';
export { createPolicyIfAbsent, registerRoutePolicy, type PolicyOrigin } from './service-policies.js';
