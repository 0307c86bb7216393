// The idempotency store: the one entry point an endpoint wraps around its work.
//
//   transactional  claim, work and completion share one transaction (the work's effects
//                  live in this database). A crash or a 5xx rolls everything back; a
//                  concurrent duplicate waits on the unique index, bounded by lock_timeout
//                  (then 409), and replays once the original commits. A retry of a completed
//                  request is answered from a committed read, outside any transaction.
//   claim-first    the claim commits first with a lease; the work may call other systems;
//                  completion records the response. A crash leaves an in-progress row that
//                  another attempt takes over once the lease has passed; a 5xx marks it
//                  failed, so a retry may run again.
import { timingSafeEqual } from 'node:crypto';
import type pg from 'pg';
import { FingerprintMismatchError, InvalidKeyIdentityError, KeyInUseError, KeyQuotaExceededError, ResponseNotStorableError } from './errors.js';
import { isStorableText } from './storable.js';
import { ignoreFlow, type ClaimOutcome, type FlowObserver } from './events.js';
import { fingerprint } from './fingerprint.js';
import { scopeFor, type EndpointPolicy, type ExecutionMode } from './policy.js';
import type { LiveKeyQuota, QuotaDecision } from './quota.js';
import type { ServicePolicies } from './service-policies.js';
import { PolicyNotFoundError } from './errors.js';
import type { ResponseKeyRing } from './response-codec.js';
import { PostgresBackend, type BackendTransaction, type IdempotencyBackend, type KeyOperations } from './backend.js';
import type { ClaimResult, ClaimValues, CompletionValues, ExistingKey, KeyIdentity, Queryable } from './statements.js';
import { newCorrelationId } from './correlation-id.js';

export interface StoredResponse {
  status: number;
  contentType: string;
  body: Buffer;
}

export interface WorkResult extends StoredResponse {
  /** What the endpoint can re-derive this response from, used when the body is over the cap. */
  reference?: string;
}

export interface WorkContext {
  /** transactional: the claim's transaction. claim-first: the pool (nothing is held open). */
  db: Queryable;
  correlationId: string;
}

export interface IdempotentCall {
  principalId: string;
  /** The operation called, e.g. "POST /api/v1/payments". */
  endpoint: string;
  method: string;
  key: string;
  /** The parsed request body; fingerprinted as canonical JSON, never stored. */
  body: unknown;
  policy: EndpointPolicy;
  mode: ExecutionMode;
  work: (context: WorkContext) => Promise<WorkResult>;
  /** Correlation id for this attempt (generated when absent). */
  correlationId?: string;
  /** Rebuilds a response that was stored as a reference (over the size cap). */
  rederive?: (reference: string, db: Queryable) => Promise<Buffer>;
}

/** What begin() needs: the call without the work. */
export type ClaimCall = Omit<IdempotentCall, 'work' | 'mode'>;

export type Begun =
  | { claimed: false; outcome: StoreOutcome }
  | {
      claimed: true;
      correlationId: string;
      /** Records the response (a 5xx marks the key failed and retryable instead). */
      finish: (result: WorkResult) => Promise<StoreOutcome>;
      /** Marks the key failed and retryable (the work crashed). */
      abandon: () => Promise<void>;
    };

export interface StoreOutcome extends StoredResponse {
  replayed: boolean;
  /** The correlation id of the attempt whose response this is (the original's on replay). */
  correlationId: string;
}

export interface StoreOptions {
  /** The Postgres pool, when no other `backend` is given (a PostgresBackend on it). */
  pool?: pg.Pool;
  /** Where keys are kept (default: PostgresBackend on `pool`, in `layout`). */
  backend?: IdempotencyBackend;
  /**
   * The service this store answers for: part of every key's identity, policy, metric and the
   * stored response's associated data (SERVICE_NAME_PATTERN). Two services sharing a database,
   * principal ids and endpoint strings never share a key.
   */
  service: string;
  fingerprintSecret: Buffer;
  keyRing: ResponseKeyRing;
  observer?: FlowObserver;
  quota?: LiveKeyQuota;
  /** The service's policies by endpoint (createRetrysafe loads them), for routes that do not carry their own. */
  policies?: ServicePolicies;
  /** With `pool`: the table's layout (detectStoreLayout); both behave the same through this API. */
  layout?: 'plain' | 'partitioned';
  /** Told when an attempt finished after its lease was taken over (the work ran twice). */
  onLeaseLost?: (id: KeyIdentity) => void;
  /**
   * Told about a failure the store outlives: the work failed and marking its key failed (so a
   * retry may run at once) failed too; the key then stays in progress until its lease ends.
   */
  onAbandonFailed?: (error: unknown, id: KeyIdentity) => void;
}

/** How many times a claim is retried when the row changes under it (swept, or a takeover race). */
const MAX_ROUNDS = 4;

type Decision = 'replay' | 'mismatch' | 'conflict' | 'takeover';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A service's name: lower-case letters, digits, `.`, `_` and `-`, 1 to 63 characters, starting with a letter or digit (the key table's check). */
export const SERVICE_NAME_PATTERN = /^[a-z0-9][a-z0-9._-]{0,62}$/;

/** Throws a RangeError naming the rule unless `service` is a valid service name. */
export function checkServiceName(service: string): string {
  if (typeof service !== 'string' || !SERVICE_NAME_PATTERN.test(service)) {
    throw new RangeError(`service must be 1 to 63 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit (got ${JSON.stringify(service.slice(0, 80))})`);
  }
  return service;
}

/** What the key table's types and checks would refuse, refused first as a typed error (a 400), not a failed statement (a 500). */
function checkIdentity(principalId: string, scope: string, key: string): void {
  if (!UUID.test(principalId)) throw new InvalidKeyIdentityError('principalId', 'must be a UUID');
  for (const [field, value, max] of [['scope', scope, 200], ['key', key, 255]] as const) {
    const bytes = Buffer.byteLength(value, 'utf8');
    if (bytes < 1 || bytes > max) throw new InvalidKeyIdentityError(field, `must be 1 to ${max} bytes`);
    if (!isStorableText(value)) throw new InvalidKeyIdentityError(field, 'must not contain NUL characters or unpaired surrogates');
  }
}

function decide(existing: ExistingKey, requestFingerprint: Buffer): Decision {
  if (existing.expired) return 'takeover'; // past its promise: a new life for the key
  if (!timingSafeEqual(existing.fingerprint, requestFingerprint)) return 'mismatch';
  if (existing.state === 'completed') return 'replay';
  if (existing.state === 'failed' || existing.leaseExpired) return 'takeover';
  return 'conflict';
}

interface Claimed {
  kind: 'claimed';
  attempts: number;
  /** The key starts a new life (first claim, or takeover of an expired row): counts against the quota. */
  fresh: boolean;
}

/** The claim found the key and answered it (a replay), or threw its 409 or 422. */
interface Settled {
  kind: 'settled';
  outcome: StoreOutcome;
}

/** The row changed under the claim (swept, or taken over by another attempt): claim again. */
const AGAIN = 'again';

/** The quota lets the request through. */
const PROCEED = 'proceed';

/** The answer of this attempt's own work (only what a StoreOutcome holds). */
function answerOf(result: WorkResult, correlationId: string): StoreOutcome {
  return { status: result.status, contentType: result.contentType, body: result.body, replayed: false, correlationId };
}

export class IdempotencyStore {
  private readonly observer: FlowObserver;
  private readonly backend: IdempotencyBackend;

  constructor(private readonly options: StoreOptions) {
    checkServiceName(options.service);
    this.observer = options.observer ?? ignoreFlow;
    if (options.backend) this.backend = options.backend;
    else if (options.pool) this.backend = new PostgresBackend(options.pool, options.layout);
    else throw new TypeError('IdempotencyStore needs a backend or a pool');
  }

  /** The service this store answers for. */
  get service(): string {
    return this.options.service;
  }

  /** The policy in force for one of this service's endpoints (PolicyNotFoundError naming both when none). */
  policyFor(endpoint: string): EndpointPolicy {
    if (!this.options.policies) {
      throw new PolicyNotFoundError(`No idempotency policy for service "${this.options.service}" endpoint "${endpoint}": this store was given no policies, so the route must carry its own`);
    }
    return this.options.policies.policyFor(endpoint);
  }

  /** Runs `call.work` at most once per scoped key (per the mode's guarantees) and returns its outcome or the replay. */
  async execute(call: IdempotentCall): Promise<StoreOutcome> {
    // The request path is written for Node's CPU: no closure, spread or promise per request
    // that it can do without (the store's own layer is a measurable share of a whole request).
    const claim = this.claimValues(call);
    try {
      const admitted = this.admit(call, claim);
      if (admitted !== PROCEED) {
        const answer = await admitted;
        if (answer !== PROCEED) return answer;
      }
      if (call.mode === 'transactional') return await this.executeTransactional(call, claim);
      return await this.executeClaimFirst(call, claim);
    } catch (error) {
      this.reportUnexpected(claim, error);
      throw error;
    }
  }

  /**
   * Claim-first without a callback: claims the key (or answers with its replay), and
   * hands back the claim to finish with the response, or to abandon (failed, retryable).
   */
  async begin(call: ClaimCall): Promise<Begun> {
    const claim = this.claimValues(call);
    try {
      const admitted = await this.admit(call, claim);
      if (admitted !== PROCEED) return { claimed: false, outcome: admitted };
      const step = await this.claimFirst(call, claim);
      if (step.kind === 'settled') return { claimed: false, outcome: step.outcome };
      const { attempts } = step;
      return {
        claimed: true,
        correlationId: claim.correlationId,
        finish: (result) => this.finishClaimFirst(call, claim, attempts, result),
        abandon: async () => {
          await this.backend.fail(claim, attempts);
        },
      };
    } catch (error) {
      this.reportUnexpected(claim, error);
      throw error;
    }
  }

  private claimValues(call: ClaimCall): ClaimValues {
    const scope = scopeFor(call.policy, call.endpoint);
    checkIdentity(call.principalId, scope, call.key);
    return {
      principalId: call.principalId,
      service: this.options.service,
      scope,
      key: call.key,
      fingerprint: fingerprint(this.options.fingerprintSecret, call),
      correlationId: call.correlationId ?? newCorrelationId(),
      leaseMs: call.policy.leaseMs,
      retentionMs: call.policy.retentionMs,
    };
  }

  /** Reports unexpected failures as the `error` outcome; the typed answers report themselves. */
  private reportUnexpected(claim: ClaimValues, error: unknown): void {
    if (!(error instanceof KeyInUseError || error instanceof FingerprintMismatchError || error instanceof KeyQuotaExceededError)) {
      this.report(claim, 'error');
    }
  }

  /**
   * The live-key quota: PROCEED, or the answer for a principal that may not create another key.
   * Synchronous (a settled promise) once the principal's count is loaded, as it is after its first request.
   */
  private admit(call: ClaimCall, claim: ClaimValues): Promise<StoreOutcome | typeof PROCEED> | typeof PROCEED {
    const { quota } = this.options;
    if (!quota) return PROCEED;
    const decision = quota.checkLoaded(claim.principalId, claim.scope, call.policy.liveKeyQuota, call.policy.retentionMs);
    if (decision?.allowed) return PROCEED;
    return this.admitSlowly(call, claim, quota, decision);
  }

  private async admitSlowly(call: ClaimCall, claim: ClaimValues, quota: LiveKeyQuota, loaded: QuotaDecision | undefined): Promise<StoreOutcome | typeof PROCEED> {
    const decision = loaded ?? (await quota.check(claim.principalId, claim.scope, call.policy.liveKeyQuota, call.policy.retentionMs));
    if (decision.allowed) return PROCEED;
    // Over quota no new key may be created, but an existing one still answers as usual.
    const existing = await this.backend.read(claim);
    if (existing && !existing.expired) {
      const verdict = decide(existing, claim.fingerprint);
      // A crashed or failed attempt of an existing key is not a new key: let it run.
      if (verdict === 'takeover') return PROCEED;
      return this.settle(verdict, existing, claim, undefined, call, this.backend.db);
    }
    this.report(claim, 'rejected');
    throw new KeyQuotaExceededError(decision.retryAfterSeconds);
  }

  /** Claim-first, whole: the claim (or its answer), the work with nothing held open, the completion. */
  private async executeClaimFirst(call: IdempotentCall, claim: ClaimValues): Promise<StoreOutcome> {
    const step = await this.claimFirst(call, claim);
    if (step.kind === 'settled') return step.outcome;
    let result: WorkResult;
    try {
      result = await call.work({ db: this.backend.db, correlationId: claim.correlationId });
    } catch (error) {
      try {
        await this.backend.fail(claim, step.attempts);
      } catch (abandonError) {
        this.options.onAbandonFailed?.(abandonError, claim);
      }
      throw error;
    }
    return this.finishClaimFirst(call, claim, step.attempts, result);
  }

  /** Claims the key outside any transaction, retrying when the row changed under the claim. */
  private async claimFirst(call: ClaimCall, claim: ClaimValues): Promise<Claimed | Settled> {
    for (let round = 0; round < MAX_ROUNDS; round += 1) {
      const step = await this.claimOnce(this.backend, call, claim, false);
      if (step === AGAIN) continue;
      if (step.kind === 'claimed' && step.fresh) this.options.quota?.note(claim.principalId, claim.scope, call.policy.retentionMs);
      return step;
    }
    throw new KeyInUseError(1);
  }

  private async finishClaimFirst(call: ClaimCall, claim: ClaimValues, attempts: number, result: WorkResult): Promise<StoreOutcome> {
    if (result.status >= 500) {
      // Not final: the key becomes failed and retryable, so a retry runs the work again.
      await this.backend.fail(claim, attempts);
      return answerOf(result, claim.correlationId);
    }
    const completed = await this.backend.complete(this.completion(claim, attempts, result, call.policy));
    if (!completed) this.options.onLeaseLost?.(claim);
    return answerOf(result, claim.correlationId);
  }

  /**
   * Transactional mode. First, before any transaction: a key whose row is committed and completed
   * (a replay) or that was used with another request (a mismatch) answers from one primary-key
   * read, as in claim-first mode, without paying for a BEGIN and a ROLLBACK. Anything else (no
   * row, one still running, failed or expired) goes through the claim inside the transaction,
   * which alone decides: the read only answers what a committed row already says. Where the
   * backend offers a session, the read and the first transaction share one connection (one pool
   * checkout, and still one at a time: the read's connection is the transaction's).
   */
  private async executeTransactional(call: IdempotentCall, claim: ClaimValues): Promise<StoreOutcome> {
    const session = this.backend.session ? await this.backend.session() : undefined;
    let first: BackendTransaction | undefined;
    try {
      const started = performance.now();
      const existing = await (session ?? this.backend).read(claim);
      if (existing && !existing.expired) {
        const decision = decide(existing, claim.fingerprint);
        if (decision === 'replay' || decision === 'mismatch') {
          // Let the connection go before answering: a re-derivation may need one of its own.
          session?.release();
          return await this.settle(decision, existing, claim, performance.now() - started, call, this.backend.db);
        }
      }
      if (session) first = await session.transaction(call.policy.lockTimeoutMs);
    } catch (error) {
      session?.release(error as Error);
      throw error;
    }
    return this.claimInTransaction(call, claim, first);
  }

  /** The claim, the work and the completion in one transaction, retried when the row changed under the claim. */
  private async claimInTransaction(call: IdempotentCall, claim: ClaimValues, first: BackendTransaction | undefined): Promise<StoreOutcome> {
    for (let round = 0; round < MAX_ROUNDS; round += 1) {
      const tx = round === 0 && first ? first : await this.backend.transaction(call.policy.lockTimeoutMs);
      // While the transaction is open, the way out is abandon(): a rollback nothing an answer
      // says depends on (a replay, a 409 or 422, a 5xx whose work is undone), so the answer
      // does not wait for it. A duplicate arriving meanwhile waits on the row, as it would have.
      let open = true;
      try {
        const step = await this.beginAndClaim(tx, call, claim);
        if (step === AGAIN) {
          open = false;
          try {
            await tx.rollback();
          } catch (error) {
            tx.release(error as Error);
            throw error;
          }
          tx.release();
          continue;
        }
        if (step.kind === 'settled') return step.outcome;
        const response = await call.work({ db: tx.db, correlationId: claim.correlationId });
        // A server error is not final: nothing of this attempt survives, a retry runs again.
        if (response.status >= 500) return answerOf(response, claim.correlationId);
        await tx.completeAndCommit(this.completion(claim, step.attempts, response, call.policy));
        open = false;
        tx.release();
        if (step.fresh) this.options.quota?.note(claim.principalId, claim.scope, call.policy.retentionMs);
        return answerOf(response, claim.correlationId);
      } finally {
        if (open) tx.abandon();
      }
    }
    throw new KeyInUseError(1);
  }

  /**
   * The transaction's beginning and the claim, awaited together: a backend that pipelines them
   * (Postgres on the store's pool) sends both in one round trip, so a replay costs what it
   * costs in claim-first mode. Should the beginning fail, a claim that then ran on its own
   * (committed) is marked failed, so nothing is left claimed outside a transaction.
   */
  private async beginAndClaim(tx: BackendTransaction, call: ClaimCall, claim: ClaimValues): Promise<Claimed | Settled | typeof AGAIN> {
    const [began, step] = await Promise.allSettled([tx.begun, this.claimOnce(tx, call, claim, true)]);
    if (began.status === 'rejected') {
      if (step.status === 'fulfilled' && step.value !== AGAIN && step.value.kind === 'claimed') {
        await tx.fail(claim, step.value.attempts).catch((error: unknown) => this.options.onAbandonFailed?.(error, claim));
      }
      throw began.reason;
    }
    if (step.status === 'rejected') throw step.reason;
    return step.value;
  }

  /**
   * One round of the claim: the claim statement, then for an existing key its dispatch
   * (replay, mismatch, conflict) or the conditional takeover. AGAIN when the row changed
   * under us (swept between claim and read, or another attempt took it over first).
   * `lockBounded`: the statements may wait on another transaction, at most lock_timeout (then a 409).
   */
  private async claimOnce(ops: KeyOperations, call: ClaimCall, claim: ClaimValues, lockBounded: boolean): Promise<Claimed | Settled | typeof AGAIN> {
    const started = performance.now();
    let result: ClaimResult;
    try {
      result = await ops.claim(claim);
    } catch (error) {
      throw lockBounded ? this.lockTimeoutAsConflict(claim, error, call.policy) : error;
    }
    const latency = performance.now() - started;
    if (result.claimed) {
      this.report(claim, 'new', latency);
      return { kind: 'claimed', attempts: result.attempts, fresh: true };
    }
    const existing = result.existing ?? (await ops.read(claim));
    if (!existing) return AGAIN;
    const decision = decide(existing, claim.fingerprint);
    if (decision !== 'takeover') return { kind: 'settled', outcome: await this.settle(decision, existing, claim, latency, call, ops.db) };
    let attempts: number | null;
    try {
      attempts = await ops.takeOver(claim, existing.attempts);
    } catch (error) {
      throw lockBounded ? this.lockTimeoutAsConflict(claim, error, call.policy) : error;
    }
    if (attempts === null) return AGAIN;
    this.report(claim, 'takeover', latency);
    return { kind: 'claimed', attempts, fresh: existing.expired };
  }

  /** A statement that waited lock_timeout out is a 409 (reported as a conflict); any other error is itself. */
  private lockTimeoutAsConflict(claim: ClaimValues, error: unknown, policy: EndpointPolicy): unknown {
    if (!this.backend.isLockTimeout(error)) return error;
    this.report(claim, 'conflict');
    return new KeyInUseError(Math.max(1, Math.ceil(policy.lockTimeoutMs / 1000)));
  }

  /** Replay, mismatch or conflict for an existing row. */
  private async settle(
    decision: Exclude<Decision, 'takeover'>,
    existing: ExistingKey,
    claim: ClaimValues,
    latency: number | undefined,
    call: ClaimCall,
    db: Queryable,
  ): Promise<StoreOutcome> {
    if (decision === 'mismatch') {
      this.report(claim, 'mismatch', latency);
      throw new FingerprintMismatchError();
    }
    if (decision === 'conflict') {
      this.report(claim, 'conflict', latency);
      throw new KeyInUseError(Math.max(1, existing.leaseRemainingSeconds));
    }
    const replay = await this.replay(existing, claim, call, db);
    this.report(claim, 'replay', latency);
    return replay;
  }

  private async replay(existing: ExistingKey, id: KeyIdentity, call: ClaimCall, db: Queryable): Promise<StoreOutcome> {
    if (existing.responseStatus === null || existing.responseContentType === null) {
      throw new Error('completed key without a stored response status');
    }
    let body: Buffer;
    if (existing.responseBody && existing.responseKeyId) {
      body = this.options.keyRing.open({ keyId: existing.responseKeyId, ciphertext: existing.responseBody }, id);
    } else if (existing.responseRef !== null && call.rederive) {
      body = await call.rederive(existing.responseRef, db);
    } else {
      throw new Error('completed key has neither a stored body nor a reference the endpoint can re-derive');
    }
    return { status: existing.responseStatus, contentType: existing.responseContentType, body, replayed: true, correlationId: existing.correlationId };
  }

  /** The completion of a claimed attempt: the response sealed, or its reference when over the cap. */
  private completion(claim: ClaimValues, attempts: number, result: WorkResult, policy: EndpointPolicy): CompletionValues {
    const size = result.body.length;
    let body: Buffer | null = null;
    let keyId: string | null = null;
    let reference: string | null = null;
    if (size <= policy.maxResponseBytes) {
      const sealed = this.options.keyRing.seal(result.body, claim);
      body = sealed.ciphertext;
      keyId = sealed.keyId;
    } else if (result.reference === undefined) {
      throw new ResponseNotStorableError(size, policy.maxResponseBytes);
    } else {
      reference = result.reference;
    }
    return {
      principalId: claim.principalId,
      service: claim.service,
      scope: claim.scope,
      key: claim.key,
      attempts,
      status: result.status,
      contentType: result.contentType,
      body,
      keyId,
      size,
      reference,
    };
  }

  private report(claim: ClaimValues, outcome: ClaimOutcome, claimLatencyMs?: number): void {
    this.observer.record({ service: claim.service, scope: claim.scope, principalId: claim.principalId, outcome, claimLatencyMs });
  }
}
