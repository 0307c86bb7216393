// The idempotency store: the one entry point an endpoint wraps around its work.
//
//   transactional  claim, work and completion share one transaction (the work's effects
//                  live in this database). A crash or a 5xx rolls everything back; a
//                  concurrent duplicate waits on the unique index, bounded by lock_timeout
//                  (then 409), and replays once the original commits.
//   claim-first    the claim commits first with a lease; the work may call other systems;
//                  completion records the response. A crash leaves an in-progress row that
//                  another attempt takes over once the lease has passed; a 5xx marks it
//                  failed, so a retry may run again.
import { randomUUID, timingSafeEqual } from 'node:crypto';
import type pg from 'pg';
import { FingerprintMismatchError, KeyInUseError, KeyQuotaExceededError, ResponseNotStorableError } from './errors';
import { ignoreFlow, type ClaimOutcome, type FlowObserver } from './events';
import { fingerprint } from './fingerprint';
import { scopeFor, type EndpointPolicy, type ExecutionMode } from './policy';
import type { LiveKeyQuota } from './quota';
import type { ResponseKeyRing } from './response-codec';
import {
  claimKey,
  completeKey,
  failKey,
  readKey,
  takeOverKey,
  type ClaimValues,
  type ExistingKey,
  type KeyIdentity,
  type Queryable,
} from './statements';

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

export interface StoreOutcome extends StoredResponse {
  replayed: boolean;
  /** The correlation id of the attempt whose response this is (the original's on replay). */
  correlationId: string;
}

export interface StoreOptions {
  pool: pg.Pool;
  fingerprintSecret: Buffer;
  keyRing: ResponseKeyRing;
  observer?: FlowObserver;
  quota?: LiveKeyQuota;
  /** Told when an attempt finished after its lease was taken over (the work ran twice). */
  onLeaseLost?: (id: KeyIdentity) => void;
}

/** How many times a claim is retried when the row changes under it (swept, or a takeover race). */
const MAX_ROUNDS = 4;
const LOCK_NOT_AVAILABLE = '55P03';

type Decision = 'replay' | 'mismatch' | 'conflict' | 'takeover';

function decide(existing: ExistingKey, requestFingerprint: Buffer): Decision {
  if (existing.expired) return 'takeover'; // past its promise: a new life for the key
  if (!timingSafeEqual(existing.fingerprint, requestFingerprint)) return 'mismatch';
  if (existing.state === 'completed') return 'replay';
  if (existing.state === 'failed' || existing.leaseExpired) return 'takeover';
  return 'conflict';
}

interface Claimed {
  attempts: number;
  /** The key starts a new life (first claim, or takeover of an expired row): counts against the quota. */
  fresh: boolean;
}

export class IdempotencyStore {
  private readonly observer: FlowObserver;

  constructor(private readonly options: StoreOptions) {
    this.observer = options.observer ?? ignoreFlow;
  }

  async execute(call: IdempotentCall): Promise<StoreOutcome> {
    const scope = scopeFor(call.policy, call.endpoint);
    const claim: ClaimValues = {
      principalId: call.principalId,
      scope,
      key: call.key,
      fingerprint: fingerprint(this.options.fingerprintSecret, call),
      correlationId: call.correlationId ?? randomUUID(),
      leaseMs: call.policy.leaseMs,
      retentionMs: call.policy.retentionMs,
    };
    try {
      const { quota } = this.options;
      if (quota) {
        const decision = await quota.check(call.principalId, scope, call.policy.liveKeyQuota, call.policy.retentionMs);
        if (!decision.allowed) return await this.overQuota(call, claim, decision.retryAfterSeconds);
      }
      return call.mode === 'transactional' ? await this.executeTransactional(call, claim) : await this.executeClaimFirst(call, claim);
    } catch (error) {
      if (!(error instanceof KeyInUseError || error instanceof FingerprintMismatchError || error instanceof KeyQuotaExceededError)) {
        this.observer.record({ scope, outcome: 'error' });
      }
      throw error;
    }
  }

  private async executeClaimFirst(call: IdempotentCall, claim: ClaimValues): Promise<StoreOutcome> {
    const { pool } = this.options;
    for (let round = 0; round < MAX_ROUNDS; round += 1) {
      const started = performance.now();
      const result = await claimKey(pool, claim);
      const latency = performance.now() - started;
      let claimed: Claimed | null = null;
      if (result.claimed) {
        claimed = { attempts: result.attempts, fresh: true };
        this.report(claim, 'new', latency);
      } else {
        const existing = result.existing ?? (await readKey(pool, claim));
        if (!existing) continue; // swept between the claim and the read: claim again
        const decision = decide(existing, claim.fingerprint);
        if (decision !== 'takeover') return this.settle(decision, existing, claim, latency, call, pool);
        const attempts = await takeOverKey(pool, claim, existing.attempts);
        if (attempts === null) continue; // another attempt took it over first
        claimed = { attempts, fresh: existing.expired };
        this.report(claim, 'takeover', latency);
      }
      if (claimed.fresh) this.options.quota?.note(claim.principalId, claim.scope, call.policy.retentionMs);
      return this.runClaimFirst(call, claim, claimed.attempts);
    }
    throw new KeyInUseError(1);
  }

  private async runClaimFirst(call: IdempotentCall, claim: ClaimValues, attempts: number): Promise<StoreOutcome> {
    const { pool } = this.options;
    let result: WorkResult;
    try {
      result = await call.work({ db: pool, correlationId: claim.correlationId });
    } catch (error) {
      await failKey(pool, claim, attempts).catch(() => undefined);
      throw error;
    }
    const outcome = { ...result, replayed: false, correlationId: claim.correlationId };
    if (result.status >= 500) {
      await failKey(pool, claim, attempts);
      return outcome;
    }
    const completed = await completeKey(pool, { ...claim, attempts, ...this.encode(result, claim, call.policy) });
    if (!completed) this.options.onLeaseLost?.(claim);
    return outcome;
  }

  private async executeTransactional(call: IdempotentCall, claim: ClaimValues): Promise<StoreOutcome> {
    const client = await this.options.pool.connect();
    let broken: Error | undefined;
    try {
      for (let round = 0; round < MAX_ROUNDS; round += 1) {
        await client.query(`BEGIN; SET LOCAL lock_timeout = ${Math.max(1, Math.round(call.policy.lockTimeoutMs))}`);
        let committed = false;
        try {
          const started = performance.now();
          const result = await this.lockBounded(claim, () => claimKey(client, claim), call.policy);
          const latency = performance.now() - started;
          let claimed: Claimed;
          if (result.claimed) {
            claimed = { attempts: result.attempts, fresh: true };
            this.report(claim, 'new', latency);
          } else {
            const existing = result.existing ?? (await readKey(client, claim));
            if (!existing) continue;
            const decision = decide(existing, claim.fingerprint);
            if (decision !== 'takeover') return await this.settle(decision, existing, claim, latency, call, client);
            const attempts = await this.lockBounded(claim, () => takeOverKey(client, claim, existing.attempts), call.policy);
            if (attempts === null) continue;
            claimed = { attempts, fresh: existing.expired };
            this.report(claim, 'takeover', latency);
          }
          const response = await call.work({ db: client, correlationId: claim.correlationId });
          const outcome = { ...response, replayed: false, correlationId: claim.correlationId };
          // A server error is not final: nothing of this attempt survives, a retry runs again.
          if (response.status >= 500) return outcome;
          await completeKey(client, { ...claim, attempts: claimed.attempts, ...this.encode(response, claim, call.policy) });
          await client.query('COMMIT');
          committed = true;
          if (claimed.fresh) this.options.quota?.note(claim.principalId, claim.scope, call.policy.retentionMs);
          return outcome;
        } finally {
          if (!committed) await client.query('ROLLBACK').catch((error: unknown) => (broken = error as Error));
        }
      }
      throw new KeyInUseError(1);
    } finally {
      // A connection whose ROLLBACK failed is discarded, not returned to the pool.
      client.release(broken);
    }
  }

  /** Runs a statement that may wait for another transaction's row; past lock_timeout it is a 409. */
  private async lockBounded<T>(claim: ClaimValues, statement: () => Promise<T>, policy: EndpointPolicy): Promise<T> {
    try {
      return await statement();
    } catch (error) {
      if ((error as { code?: unknown }).code !== LOCK_NOT_AVAILABLE) throw error;
      this.report(claim, 'conflict');
      throw new KeyInUseError(Math.max(1, Math.ceil(policy.lockTimeoutMs / 1000)));
    }
  }

  /** Replay, mismatch or conflict for an existing row. */
  private async settle(
    decision: Exclude<Decision, 'takeover'>,
    existing: ExistingKey,
    claim: ClaimValues,
    latency: number | undefined,
    call: IdempotentCall,
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

  private async replay(existing: ExistingKey, id: KeyIdentity, call: IdempotentCall, db: Queryable): Promise<StoreOutcome> {
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

  /** Over quota: no new key may be created, but an existing one still answers as usual. */
  private async overQuota(call: IdempotentCall, claim: ClaimValues, retryAfterSeconds: number): Promise<StoreOutcome> {
    const existing = await readKey(this.options.pool, claim);
    if (existing && !existing.expired) {
      const decision = decide(existing, claim.fingerprint);
      if (decision !== 'takeover') return this.settle(decision, existing, claim, undefined, call, this.options.pool);
      // A crashed or failed attempt of an existing key is not a new key: let it run.
      return call.mode === 'transactional' ? this.executeTransactional(call, claim) : this.executeClaimFirst(call, claim);
    }
    this.report(claim, 'rejected');
    throw new KeyQuotaExceededError(retryAfterSeconds);
  }

  private encode(result: WorkResult, id: KeyIdentity, policy: EndpointPolicy) {
    const size = result.body.length;
    const base = { status: result.status, contentType: result.contentType, size };
    if (size <= policy.maxResponseBytes) {
      const sealed = this.options.keyRing.seal(result.body, id);
      return { ...base, body: sealed.ciphertext, keyId: sealed.keyId, reference: null };
    }
    if (result.reference === undefined) throw new ResponseNotStorableError(size, policy.maxResponseBytes);
    return { ...base, body: null, keyId: null, reference: result.reference };
  }

  private report(claim: ClaimValues, outcome: ClaimOutcome, claimLatencyMs?: number): void {
    this.observer.record({ scope: claim.scope, outcome, claimLatencyMs });
  }
}
