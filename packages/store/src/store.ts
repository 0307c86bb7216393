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
import { FingerprintMismatchError, InvalidKeyIdentityError, KeyInUseError, KeyQuotaExceededError, ResponseNotStorableError, TransactionsUnsupportedError } from './errors.js';
import { isStorableText } from './storable.js';
import { ignoreFlow, type ClaimOutcome, type FlowObserver } from './events.js';
import { fingerprint } from './fingerprint.js';
import { scopeFor, type EndpointPolicy, type ExecutionMode } from './policy.js';
import { QuotaReservation, type LiveKeyQuota, type QuotaRefusal } from './quota.js';
import { registerRoutePolicy, type ServicePolicies } from './service-policies.js';
import { PolicyNotFoundError } from './errors.js';
import type { ResponseKeyRing } from './response-codec.js';
import { PostgresBackend, type BackendTransaction, type IdempotencyBackend, type KeyOperations } from './backend.js';
import type { ClaimResult, ClaimValues, CompletionValues, ExistingKey, KeyIdentity, PoolerMode, Queryable } from './statements.js';
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

export interface WorkContext<Db = Queryable> {
  /** transactional: the claim's transaction. claim-first: the pool (nothing is held open). Postgres: pg; MySQL: mysql2. */
  db: Db;
  correlationId: string;
}

export interface IdempotentCall<Db = Queryable> {
  principalId: string;
  /** The operation called, e.g. "POST /api/v1/payments". */
  endpoint: string;
  method: string;
  key: string;
  /** The parsed request body; fingerprinted as canonical JSON, never stored. */
  body: unknown;
  /** canonicalBody(body), when the caller already computed it: fingerprinted instead of computing it again. */
  canonicalBody?: string;
  policy: EndpointPolicy;
  mode: ExecutionMode;
  work: (context: WorkContext<Db>) => Promise<WorkResult>;
  /** Correlation id for this attempt (generated when absent). */
  correlationId?: string;
  /** Rebuilds a response that was stored as a reference (over the size cap). */
  rederive?: (reference: string, db: Db) => Promise<Buffer>;
}

/** What begin() needs: the call without the work. */
export type ClaimCall<Db = Queryable> = Omit<IdempotentCall<Db>, 'work' | 'mode'>;

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

export interface StoreOptions<Db = Queryable> {
  /** The Postgres pool, when no other `backend` is given (a PostgresBackend on it). */
  pool?: pg.Pool;
  /** Where keys are kept (default: PostgresBackend on `pool`, in `layout`). */
  backend?: IdempotencyBackend<Db>;
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
  /** With `pool`: it goes through a transaction-mode pooler (PgBouncer): see PostgresBackend. */
  pooler?: PoolerMode;
  /** With `pooler`: the server connections carry the planner settings already (PostgresBackend, plannerSettingsInPlace). */
  plannerSettingsInPlace?: boolean;
  /** Told when an attempt finished after its lease was taken over (the work ran twice). */
  onLeaseLost?: (id: KeyIdentity) => void;
  /**
   * Told about a failure the store outlives: the work failed and marking its key failed (so a
   * retry may run at once) failed too; the key then stays in progress until its lease ends.
   */
  onAbandonFailed?: (error: unknown, id: KeyIdentity) => void;
  /**
   * Told when an attempt's work ran but its response could not be recorded, its completion
   * having failed and, where the failure allowed it (a lost connection, a pooler's error), been
   * retried until shortly before its lease ends: the key stays in progress until then, and a
   * retry after it runs the work again. Counted in `unrecordedCompletions`; createRetrysafe also
   * hands it to the flow recorder, whose flush writes it for the dashboard (unrecorded_completions).
   */
  onCompletionFailed?: (error: unknown, attempt: UnrecordedAttempt) => void;
}

/** An attempt whose work ran and whose response could not be recorded (onCompletionFailed). */
export interface UnrecordedAttempt extends KeyIdentity {
  /** The attempt's own correlation id (its X-Correlation-Id). */
  correlationId: string;
  /** Its policy's retention: the record of the failure is kept as long as the key would have been. */
  retentionMs: number;
}

/** How long before its lease ends an attempt stops retrying its completion (at most; a tenth of a short lease). */
const LEASE_MARGIN_MS = 1_000;
/** The first wait between completion retries, doubled each time up to the cap. */
const RETRY_FIRST_MS = 25;
const RETRY_CAP_MS = 1_000;
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

/** The quota lets the request through without a reservation (no quota, or an existing key's takeover). */
const PROCEED = 'proceed';

/** What admission lets through: a quota reservation to keep or release once the claim has settled, or PROCEED. */
type Admitted = QuotaReservation | typeof PROCEED;

/** The answer of this attempt's own work (only what a StoreOutcome holds). */
function answerOf(result: WorkResult, correlationId: string): StoreOutcome {
  return { status: result.status, contentType: result.contentType, body: result.body, replayed: false, correlationId };
}

export class IdempotencyStore<Db = Queryable> {
  private readonly observer: FlowObserver;
  private readonly backend: IdempotencyBackend<Db>;
  /** Attempts whose work ran and whose completion could not be recorded (onCompletionFailed). */
  unrecordedCompletions = 0;
  /** Completions (and failure marks) that failed transiently and were sent again within the lease. */
  completionRetries = 0;

  constructor(private readonly options: StoreOptions<Db>) {
    checkServiceName(options.service);
    this.observer = options.observer ?? ignoreFlow;
    if (options.backend) this.backend = options.backend;
    // Without a backend the store is Postgres's, whose work gets a pg Queryable: Db is its default here.
    else if (options.pool) this.backend = new PostgresBackend(options.pool, options.layout, { pooler: options.pooler, plannerSettingsInPlace: options.plannerSettingsInPlace }) as IdempotencyBackend<unknown> as IdempotencyBackend<Db>;
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

  /**
   * Registers a route's own policy in this service's endpoint_policies (created when absent,
   * with its first history entry; an existing row is left as it is) and, when `declared`, records the code's values for
   * the retention review. Once per route, off the request path (http.ts); resolves false when the
   * store has no Postgres pool to register in.
   */
  async registerRoutePolicy(endpoint: string, policy: EndpointPolicy, declared: boolean): Promise<boolean> {
    if (this.options.policies) await this.options.policies.registerRoute(endpoint, policy, declared);
    else if (this.options.pool) await registerRoutePolicy(this.options.pool, this.options.service, endpoint, policy, declared);
    else return false;
    return true;
  }

  /**
   * Throws TransactionsUnsupportedError when this store's backend cannot run `mode` (a
   * transactional route on a claim-first-only backend such as Redis). Adapters call it when a
   * route is created (checkRoutePolicy), and execute() before anything else.
   */
  checkMode(mode: ExecutionMode): void {
    if (mode === 'transactional' && this.backend.transactional === false) throw new TransactionsUnsupportedError();
  }

  /** Runs `call.work` at most once per scoped key (per the mode's guarantees) and returns its outcome or the replay. */
  async execute(call: IdempotentCall<Db>): Promise<StoreOutcome> {
    this.checkMode(call.mode);
    // The request path is written for Node's CPU: no closure, spread or promise per request
    // that it can do without (the store's own layer is a measurable share of a whole request).
    const claim = this.claimValues(call);
    let reservation: QuotaReservation | null = null;
    try {
      const admission = this.admit(call, claim);
      const admitted = admission instanceof Promise ? await admission : admission;
      if (admitted !== PROCEED && !(admitted instanceof QuotaReservation)) return admitted;
      if (admitted !== PROCEED) reservation = admitted;
      if (call.mode === 'transactional') return await this.executeTransactional(call, claim, reservation);
      return await this.executeClaimFirst(call, claim, reservation);
    } catch (error) {
      this.reportUnexpected(claim, error);
      throw error;
    } finally {
      // No new key was kept (a replay, a conflict, a mismatch, a failure, a rollback): give the slot back.
      reservation?.release();
    }
  }

  /**
   * Claim-first without a callback: claims the key (or answers with its replay), and
   * hands back the claim to finish with the response, or to abandon (failed, retryable).
   */
  async begin(call: ClaimCall<Db>): Promise<Begun> {
    const claim = this.claimValues(call);
    let reservation: QuotaReservation | null = null;
    try {
      const admitted = await this.admit(call, claim);
      if (admitted !== PROCEED && !(admitted instanceof QuotaReservation)) return { claimed: false, outcome: admitted };
      if (admitted !== PROCEED) reservation = admitted;
      const claimSentAt = performance.now();
      const step = await this.claimFirst(call, claim, reservation);
      if (step.kind === 'settled') return { claimed: false, outcome: step.outcome };
      const { attempts } = step;
      return {
        claimed: true,
        correlationId: claim.correlationId,
        finish: (result) => this.finishClaimFirst(call, claim, attempts, result, claimSentAt),
        abandon: async () => {
          await this.backend.fail(claim, attempts);
        },
      };
    } catch (error) {
      reservation?.release();
      this.reportUnexpected(claim, error);
      throw error;
    }
  }

  private claimValues(call: ClaimCall<Db>): ClaimValues {
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
      // Never shorter than the published window, whatever a route's own policy says.
      retentionMs: call.policy.retentionMs >= call.policy.retryWindowMs ? call.policy.retentionMs : call.policy.retryWindowMs,
    };
  }

  /** Reports unexpected failures as the `error` outcome; the typed answers report themselves. */
  private reportUnexpected(claim: ClaimValues, error: unknown): void {
    if (!(error instanceof KeyInUseError || error instanceof FingerprintMismatchError || error instanceof KeyQuotaExceededError)) {
      this.report(claim, 'error');
    }
  }

  /**
   * The live-key quota: the request's reservation (its slot, taken before the claim's round trip,
   * so requests in flight cannot all pass one check), PROCEED, or the answer for a principal that
   * may not create another key. Synchronous once the principal's count is loaded, as it is after
   * its first request; until then the requests wait on its one load, then reserve in turn.
   */
  private admit(call: ClaimCall<Db>, claim: ClaimValues): Promise<StoreOutcome | Admitted> | Admitted {
    const { quota } = this.options;
    if (!quota) return PROCEED;
    const admitted = quota.reserveLoaded(claim.principalId, claim.scope, call.policy.liveKeyQuota, call.policy.retentionMs);
    if (admitted instanceof QuotaReservation) return admitted;
    return this.admitSlowly(call, claim, quota, admitted);
  }

  private async admitSlowly(call: ClaimCall<Db>, claim: ClaimValues, quota: LiveKeyQuota, loaded: QuotaRefusal | undefined): Promise<StoreOutcome | Admitted> {
    const decision = loaded ?? (await quota.reserve(claim.principalId, claim.scope, call.policy.liveKeyQuota, call.policy.retentionMs));
    if (decision instanceof QuotaReservation) return decision;
    // Over quota no new key may be created, but an existing one still answers as usual.
    const existing = await this.backend.read(claim);
    if (existing && !existing.expired) {
      const verdict = decide(existing, claim.fingerprint);
      // A crashed or failed attempt of an existing key is not a new key: let it run.
      if (verdict === 'takeover') return PROCEED;
      return this.settle(verdict, existing, claim, undefined, call, this.backend.db);
    }
    this.report(claim, 'rejected', undefined, 429);
    throw new KeyQuotaExceededError(decision.retryAfterSeconds);
  }

  /** Claim-first, whole: the claim (or its answer), the work with nothing held open, the completion. */
  private async executeClaimFirst(call: IdempotentCall<Db>, claim: ClaimValues, reservation: QuotaReservation | null): Promise<StoreOutcome> {
    // The lease begins when the claim reaches the database: no earlier than this.
    const claimSentAt = performance.now();
    const step = await this.claimFirst(call, claim, reservation);
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
    return this.finishClaimFirst(call, claim, step.attempts, result, claimSentAt);
  }

  /**
   * Claims the key outside any transaction, retrying when the row changed under the claim. The
   * quota's reservation is settled here: a new key's row now exists (even should its work fail,
   * it stays, failed, until it expires, and its retry is no new key), anything else gives it back.
   */
  private async claimFirst(call: ClaimCall<Db>, claim: ClaimValues, reservation: QuotaReservation | null): Promise<Claimed | Settled> {
    for (let round = 0; round < MAX_ROUNDS; round += 1) {
      const step = await this.claimOnce(this.backend, call, claim, false);
      if (step === AGAIN) continue;
      if (step.kind === 'claimed' && step.fresh) this.keyCreated(reservation, call, claim);
      else reservation?.release();
      return step;
    }
    throw new KeyInUseError(1);
  }

  private async finishClaimFirst(call: ClaimCall<Db>, claim: ClaimValues, attempts: number, result: WorkResult, claimSentAt: number): Promise<StoreOutcome> {
    if (result.status >= 500) {
      // Not final: the key becomes failed and retryable, so a retry runs the work again.
      try {
        await this.backend.fail(claim, attempts);
      } catch (error) {
        await this.withinLease(claim, claimSentAt, error, () => this.backend.fail(claim, attempts));
      }
      return answerOf(result, claim.correlationId);
    }
    const values = this.completion(claim, attempts, result, call.policy);
    let completed: boolean;
    try {
      completed = await this.backend.complete(values);
    } catch (error) {
      completed = await this.completeAfterFailure(claim, attempts, values, claimSentAt, error);
    }
    if (!completed) this.options.onLeaseLost?.(claim);
    return answerOf(result, claim.correlationId);
  }

  /**
   * The work ran and its completion failed. A failure that says nothing of the statement's
   * outcome (isTransient: a lost connection, a pooler's error) is retried until shortly before
   * the lease ends: the completion is fenced by the attempt number, so sending it again is safe,
   * and one that finds nothing to update was either recorded by an earlier send (read back
   * here) or superseded. Any other failure, or none in time: reported with the key
   * (onCompletionFailed, unrecordedCompletions) and thrown.
   */
  private async completeAfterFailure(claim: ClaimValues, attempts: number, values: CompletionValues, claimSentAt: number, failure: unknown): Promise<boolean> {
    try {
      if (await this.withinLease(claim, claimSentAt, failure, () => this.backend.complete(values))) return true;
      // An earlier send may have committed before its answer was lost.
      const row = await this.backend.read(claim);
      return row !== null && row.state === 'completed' && row.attempts === attempts && row.correlationId === claim.correlationId;
    } catch (error) {
      this.unrecordedCompletions += 1;
      this.options.onCompletionFailed?.(error, {
        principalId: claim.principalId,
        service: claim.service,
        scope: claim.scope,
        key: claim.key,
        correlationId: claim.correlationId,
        retentionMs: claim.retentionMs,
      });
      throw error;
    }
  }

  /** Sends `operation` again after a transient `failure` while the lease lasts (with a margin); throws the last failure otherwise. */
  private async withinLease<T>(claim: ClaimValues, claimSentAt: number, failure: unknown, operation: () => Promise<T>): Promise<T> {
    const deadline = claimSentAt + claim.leaseMs - Math.min(LEASE_MARGIN_MS, claim.leaseMs / 10);
    let last = failure;
    let wait = RETRY_FIRST_MS;
    while (this.backend.isTransient?.(last) && performance.now() + wait < deadline) {
      await new Promise((done) => setTimeout(done, wait));
      wait = Math.min(wait * 2, RETRY_CAP_MS);
      this.completionRetries += 1;
      try {
        return await operation();
      } catch (error) {
        last = error;
      }
    }
    throw last;
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
  private async executeTransactional(call: IdempotentCall<Db>, claim: ClaimValues, reservation: QuotaReservation | null): Promise<StoreOutcome> {
    const session = this.backend.session ? await this.backend.session() : undefined;
    let first: BackendTransaction<Db> | undefined;
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
    return this.claimInTransaction(call, claim, first, reservation);
  }

  /** A new key was made: it counts against its principal's quota (its reservation kept, or counted now). */
  private keyCreated(reservation: QuotaReservation | null, call: ClaimCall<Db>, claim: ClaimValues): void {
    if (reservation) reservation.keep();
    else this.options.quota?.note(claim.principalId, claim.scope, call.policy.retentionMs);
  }

  /** The claim, the work and the completion in one transaction, retried when the row changed under the claim. */
  private async claimInTransaction(call: IdempotentCall<Db>, claim: ClaimValues, first: BackendTransaction<Db> | undefined, reservation: QuotaReservation | null): Promise<StoreOutcome> {
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
        // Only a committed new key counts; any other way out gives the reservation back (execute()).
        if (step.fresh) this.keyCreated(reservation, call, claim);
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
  private async beginAndClaim(tx: BackendTransaction<Db>, call: ClaimCall<Db>, claim: ClaimValues): Promise<Claimed | Settled | typeof AGAIN> {
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
  private async claimOnce(ops: KeyOperations<Db>, call: ClaimCall<Db>, claim: ClaimValues, lockBounded: boolean): Promise<Claimed | Settled | typeof AGAIN> {
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
    this.report(claim, 'conflict', undefined, 409);
    return new KeyInUseError(Math.max(1, Math.ceil(policy.lockTimeoutMs / 1000)));
  }

  /** Replay, mismatch or conflict for an existing row. */
  private async settle(
    decision: Exclude<Decision, 'takeover'>,
    existing: ExistingKey,
    claim: ClaimValues,
    latency: number | undefined,
    call: ClaimCall<Db>,
    db: Db,
  ): Promise<StoreOutcome> {
    if (decision === 'mismatch') {
      this.report(claim, 'mismatch', latency, 422);
      throw new FingerprintMismatchError();
    }
    if (decision === 'conflict') {
      this.report(claim, 'conflict', latency, 409);
      throw new KeyInUseError(Math.max(1, existing.leaseRemainingSeconds));
    }
    const replay = await this.replay(existing, claim, call, db);
    this.report(claim, 'replay', latency, replay.status);
    return replay;
  }

  private async replay(existing: ExistingKey, id: KeyIdentity, call: ClaimCall<Db>, db: Db): Promise<StoreOutcome> {
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
      correlationId: claim.correlationId,
      status: result.status,
      contentType: result.contentType,
      body,
      keyId,
      size,
      reference,
    };
  }

  /** `status`: what a traced outcome answered (replay, 409, 422, 429); the recorder keeps those per key. */
  private report(claim: ClaimValues, outcome: ClaimOutcome, claimLatencyMs?: number, status?: number): void {
    this.observer.record({
      service: claim.service,
      scope: claim.scope,
      principalId: claim.principalId,
      outcome,
      claimLatencyMs,
      key: claim.key,
      correlationId: claim.correlationId,
      status,
      retentionMs: claim.retentionMs,
    });
  }
}
