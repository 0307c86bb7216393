// The idempotency store's public API, for the app and for any other Node service.
export { IdempotencyStore, type Begun, type ClaimCall, type IdempotentCall, type StoreOptions, type StoreOutcome, type StoredResponse, type WorkContext, type WorkResult } from './store';
export { idempotentHandler, parseIdempotencyKey, problemResponse, type IdempotentEndpoint, type Principal, type Problem } from './http';
export { INTENT_SCOPE, scopeFor, type EndpointPolicy, type ExecutionMode, type ScopeMode } from './policy';
export { LiveKeyQuota, type QuotaOptions } from './quota';
export { ResponseKeyRing, type ResponseKey } from './response-codec';
export { fingerprint, canonicalBody, type CanonicalRequest } from './fingerprint';
export { claimOutcomes, ignoreFlow, type ClaimOutcome, type FlowEvent, type FlowObserver } from './events';
export * from './errors';
