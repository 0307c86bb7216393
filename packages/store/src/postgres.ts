// The Postgres backend's own surface, for tools that work on the store's tables directly
// (plan tests, benchmarks, the dashboard): statement texts, the session settings the store's
// plans rely on, the statement functions, and the dashboard's key reads (PostgresKeyReads).
export {
  STORE_POOL_SETTINGS,
  STORE_SESSION_OPTIONS,
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
export { PostgresBackend } from './backend.js';
export { KEY_LIST_SCAN_ROWS, keyReadStatementTexts, PostgresKeyReads, principalKeysStatement } from './key-reads.js';
