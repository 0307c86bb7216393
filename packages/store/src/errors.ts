// The store's typed outcomes that are not a response of the endpoint's own. Each carries a
// stable `code`; the HTTP layer maps codes to statuses once (problemFor), and nothing compares
// error messages or relies on instanceof, so two copies of the package in one process (a
// bundled and an unbundled one, say) still agree.

export const idempotencyErrorCodes = [
  'KEY_IN_USE',
  'FINGERPRINT_MISMATCH',
  'KEY_QUOTA_EXCEEDED',
  'UNCANONICAL_REQUEST',
  'RESPONSE_NOT_STORABLE',
  'STORED_RESPONSE_UNREADABLE',
  'INVALID_KEY_IDENTITY',
] as const;
export type IdempotencyErrorCode = (typeof idempotencyErrorCodes)[number];

export abstract class IdempotencyError extends Error {
  abstract readonly code: IdempotencyErrorCode;
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** Another attempt with this key is still running (or holds the row past lock_timeout). */
export class KeyInUseError extends IdempotencyError {
  readonly code = 'KEY_IN_USE';
  constructor(readonly retryAfterSeconds: number) {
    super('A request with this idempotency key is still being processed');
  }
}

/** The key was used before with a different request. */
export class FingerprintMismatchError extends IdempotencyError {
  readonly code = 'FINGERPRINT_MISMATCH';
  constructor() {
    super('This idempotency key was already used with a different request');
  }
}

/** The principal holds as many live keys in this scope as its policy allows. */
export class KeyQuotaExceededError extends IdempotencyError {
  readonly code = 'KEY_QUOTA_EXCEEDED';
  constructor(readonly retryAfterSeconds: number) {
    super('Too many live idempotency keys for this principal');
  }
}

/** The request cannot be fingerprinted (not representable as canonical JSON). */
export class UncanonicalRequestError extends IdempotencyError {
  readonly code = 'UNCANONICAL_REQUEST';
  constructor(reason: string) {
    super(`The request body cannot be canonicalised: ${reason}`);
  }
}

/** A body over the size cap was produced without a reference to re-derive it from. */
export class ResponseNotStorableError extends IdempotencyError {
  readonly code = 'RESPONSE_NOT_STORABLE';
  constructor(size: number, cap: number) {
    super(`Response of ${size} bytes is over the ${cap}-byte cap and the endpoint gave no reference`);
  }
}

/** A stored response could not be decrypted (unknown key id or tampered ciphertext). */
export class StoredResponseUnreadableError extends IdempotencyError {
  readonly code = 'STORED_RESPONSE_UNREADABLE';
  constructor(reason: string) {
    super(`The stored response cannot be read: ${reason}`);
  }
}

/** The scoped key cannot be stored: a principal that is not a UUID, a key or scope outside its byte bounds, or text Postgres cannot hold. */
export class InvalidKeyIdentityError extends IdempotencyError {
  readonly code = 'INVALID_KEY_IDENTITY';
  constructor(readonly field: 'principalId' | 'scope' | 'key' | 'service', reason: string) {
    super(`${field} ${reason}`);
  }
}

/** A service's endpoint has no idempotency policy: a configuration error, thrown at start-up (route creation) where it can be. */
export class PolicyNotFoundError extends Error {
  readonly code = 'POLICY_NOT_FOUND';
  constructor(message: string) {
    super(message);
    this.name = 'PolicyNotFoundError';
  }
}

/** A transactional request, or a transaction, asked of a backend that has none (Redis): a configuration error. */
export class TransactionsUnsupportedError extends Error {
  readonly code = 'TRANSACTIONS_UNSUPPORTED';
  constructor(readonly backend = 'The Redis backend') {
    super(`${backend} is claim-first only: it shares no transaction with the work's effects. Use mode 'claim-first' for this route, or keep its keys in Postgres (createRetrysafe without \`redis\`)`);
    this.name = 'TransactionsUnsupportedError';
  }
}

const knownCodes: ReadonlySet<string> = new Set(idempotencyErrorCodes);

/** An error of this package (any copy of it), told by its code. */
export function isIdempotencyError(error: unknown): error is IdempotencyError {
  if (typeof error !== 'object' || error === null || !(error instanceof Error)) return false;
  const code: unknown = (error as { code?: unknown }).code;
  return typeof code === 'string' && knownCodes.has(code);
}
