/**
 * Idempotency keys on Postgres: the store, its composition root (`createRetrysafe`) and the framework-neutral HTTP layer.
 *
 * @module @retrysafe/store
 */
// @retrysafe/store: idempotency keys on Postgres. The store, its composition root and the
// framework-neutral HTTP layer; adapters are in the subpaths /express, /fastify, /hono, /next
// and /fetch, the Postgres backend's statements in /postgres.
export { createRetrysafe, detectLayout, type MysqlBackendTypes, type RedisOptions, type Retrysafe, type RetrysafeMysqlDb, type RetrysafeMysqlOptions, type RetrysafeOptions, type RetrysafeRedis } from './retrysafe.js';
export type { EffectQuery, ReconcileOptions, ReconcileRun } from './redis-reconcile.js';
export {
  checkServiceName,
  IdempotencyStore,
  SERVICE_NAME_PATTERN,
  type Begun,
  type ClaimCall,
  type IdempotentCall,
  type StoreOptions,
  type StoreOutcome,
  type StoredResponse,
  type UnrecordedAttempt,
  type WorkContext,
  type WorkResult,
} from './store.js';
export {
  answerIdempotent,
  checkRoutePolicy,
  jsonResult,
  KEY_PATTERN,
  parseIdempotencyKey,
  PROBLEM_CONTENT_TYPE,
  problemAnswer,
  problemFor,
  problemResponse,
  readLimited,
  RequestBodyError,
  routePolicyRegistered,
  toResponse,
  type HttpAnswer,
  type IdempotentRoute,
  type Principal,
  type Problem,
  type RequestBody,
  type RequestView,
  type RoutePolicySource,
} from './http.js';
export { validate, type SafeParser, type StandardResult, type StandardSchemaV1, type Validated, type Validator } from './validator.js';
export { INTENT_SCOPE, scopeFor, type EndpointPolicy, type ExecutionMode, type ScopeMode } from './policy.js';
export { LiveKeyQuota, QuotaReservation, type QuotaDecision, type QuotaOptions, type QuotaRefusal } from './quota.js';
export { PostgresBackend, type BackendSession, type BackendTransaction, type IdempotencyBackend, type KeyOperations } from './backend.js';
export {
  KeyReadUnsupportedError,
  PostgresKeyReads,
  type CorrelationRecord,
  type KeyCursor,
  type KeyListQuery,
  type KeyLookupQuery,
  type KeyMetadata,
  type KeyPage,
  type KeyRecord,
  type KeyRecordReads,
  type KeyState,
  type KeySummary,
  type MetadataValue,
  type StaleClaim,
  type StaleClaimRelease,
  type StaleClaimReleaser,
  type StoreBackend,
} from './key-reads.js';
export { ServicePolicies, type ServicePoliciesOptions } from './service-policies.js';
export { LEGACY_SERVICE, ResponseKeyRing, type ResponseKey, type RowIdentity, type SealedBody } from './response-codec.js';
export { parseResponseKeys } from './response-keys.js';
export { newCorrelationId } from './correlation-id.js';
export { canonicalBody, fingerprint, type CanonicalRequest } from './fingerprint.js';
export { claimOutcomes, ignoreFlow, principalOutcomes, type ClaimOutcome, type FlowEvent, type FlowObserver, type PrincipalOutcome } from './events.js';
export {
  ALL,
  errorClassOf,
  FlowRecorder,
  observeAll,
  PRINCIPAL_TOP_K,
  principalRows,
  SERIES_STEPS,
  UNRECORDED_KEPT,
  type PrincipalRow,
  type PrincipalSummary,
  type RecorderOptions,
} from './recorder.js';
export { namePrincipal } from './principal-names.js';
export { mergeHeavyHitters, MisraGries, type HeavyHitter } from './heavy-hitters.js';
export { BUCKET_BOUNDS_MS, BUCKET_COUNT, bucketOf, bucketUpperBound, percentileOf } from './histogram.js';
export { checkStoreSchema, STORE_SCHEMA_VERSION, StoreSchemaMismatchError } from './schema.js';
export { PACKAGE_VERSION } from './version.js';
export type { ServiceStart } from './service-starts.js';
export { periodicTask, type PeriodicTask, type PeriodicTaskOptions } from './periodic.js';
export { isStorableText, UNSTORABLE_TEXT } from './storable.js';
export * from './errors.js';
export { databaseUnavailableReason, isDatabaseUnavailable, UNAVAILABLE_RETRY_AFTER_SECONDS, type UnavailableReason } from './unavailable.js';
export type { Queryable, KeyIdentity, PoolerMode } from './statements.js';
