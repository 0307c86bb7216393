/**
 * The Redis backend: key records in Redis (claim-first only), one round trip per claim and per completion, and the eviction alarm.
 *
 * @module @retrysafe/store/redis
 */
// Key records in Redis, behind the same seam as Postgres (IdempotencyBackend): each operation
// is one Lua script, run with EVALSHA (EVAL once the server answers NOSCRIPT: after a restart, a
// failover or SCRIPT FLUSH), so a claim, a completion, a failure mark and a takeover each cost one
// round trip and are atomic against every other. Times come from the Redis clock (TIME), so
// instances with skewed clocks agree, as they do on Postgres's now(). A record expires by Redis
// itself (PEXPIRE = the policy's retention, never shorter than its published window): an
// evicting maxmemory-policy would drop records early, which is why createRetrysafe refuses an
// allkeys-* policy (redis-memory.ts). Claim-first only: Redis shares no transaction with the
// work's effects, so transaction() refuses, and the store refuses a transactional request.
import { createHash } from 'node:crypto';
import { createClient, ErrorReply, RESP_TYPES, type RedisClientOptions } from 'redis';
import type { BackendTransaction, IdempotencyBackend } from './backend.js';
import { TransactionsUnsupportedError } from './errors.js';
import type { ClaimResult, ClaimValues, CompletionValues, ExistingKey, KeyIdentity, Queryable } from './statements.js';
import type { UnavailableReason } from './unavailable.js';
import type { RedisCommands } from './redis-memory.js';


/**
 * The Redis key of one record: `retrysafe:{principal:service}:<scope length>:<scope>:<key>`. The
 * hash tag `{principal:service}` puts every key of a principal's service (the record, and the
 * principal's index of recent keys) in one slot of a cluster, so one script may touch them all.
 * The scope's length makes the name unambiguous whatever characters the scope and key hold.
 */
export function recordKey(id: KeyIdentity): string {
  return `retrysafe:{${id.principalId}:${id.service}}:${recordMember(id.scope, id.key)}`;
}

/** A record's name within its principal's service: `<scope length>:<scope>:<key>` (its member in principalIndexKey). */
export function recordMember(scope: string, key: string): string {
  return lengthPrefixed(scope, key);
}

/**
 * A principal's index of its records in one service, for the dashboard's key list without SCAN: a
 * sorted set of recordMember by creation time (ms), in the records' slot. The claim adds a new
 * record and drops entries created longer ago than its own retention; the index expires after the
 * longest retention of the claims that wrote it. Reads skip (and drop) entries whose record is gone.
 */
export function principalIndexKey(principalId: string, service: string): string {
  return `retrysafe:{${principalId}:${service}}:keys`;
}

/**
 * The dashboard's index of a scope's claims in flight, on one Redis server (not a cluster: it sits
 * outside the principal's hash slot): a sorted set of inFlightMember by lease expiry (ms). The claim
 * and a takeover add the attempt, its completion or failure removes it, so what remains with a
 * score before now is a stale claim (its attempt crashed or hung): the stale-claims list reads it
 * oldest lease first, with no SCAN. One set per (service, scope), so that its entries share one
 * retention: the claim drops those whose lease ended longer ago than that (their records have
 * expired). The set has no expiry of its own (one command less a claim): it holds only what is in
 * flight or stale, and Redis removes it once its last entry is.
 */
export function inFlightIndexKey(service: string, scope: string): string {
  return `retrysafe:inflight:${service.length}:${service}:${scope.length}:${scope}`;
}

/**
 * The dashboard's index of one principal's claims in flight in one service, on a Redis Cluster: a
 * sorted set of recordMember by lease expiry (ms), in the records' slot (hash tag
 * `{principal:service}`), so the claim script writes it in its one round trip. The cluster's
 * counterpart of inFlightIndexKey (which sits outside any principal's slot): written and trimmed
 * by the same scripts, and with an expiry, as the principal's index, no shorter than the longest
 * retention of the claims that wrote it (a principal that stops claiming leaves no set behind).
 * The dashboard finds the principals to read from Postgres (the quota's counters).
 */
export function principalInFlightKey(principalId: string, service: string): string {
  return `retrysafe:{${principalId}:${service}}:inflight`;
}

/** A claim's member in inFlightIndexKey: `<principal length>:<principal>:<key>`. */
export function inFlightMember(principalId: string, key: string): string {
  return lengthPrefixed(principalId, key);
}

/** Parses inFlightMember back into principal and key. */
export function parseInFlightMember(member: string): { principalId: string; key: string } | null {
  const parts = splitLengthPrefixed(member);
  return parts && { principalId: parts[0], key: parts[1] };
}

/**
 * The dashboard's index by correlation id, on one Redis server (not a cluster): a string naming
 * the record whose claim (or takeover) had this id (correlationTarget), written by that script
 * with the record's own expiry. A takeover's new id gets its own; the old one is left to expire,
 * and a read checks the record still has the id asked (as Postgres finds a record by its current id).
 */
export function correlationIndexKey(correlationId: string): string {
  return `retrysafe:cid:${correlationId}`;
}

/** What correlationIndexKey holds: the record's identity, each part after its length. */
export function correlationTarget(id: KeyIdentity): string {
  return lengthPrefixed(id.principalId, lengthPrefixed(id.service, recordMember(id.scope, id.key)));
}

/** Parses correlationTarget back into the record's identity. */
export function parseCorrelationTarget(target: string): KeyIdentity | null {
  const principal = splitLengthPrefixed(target);
  const service = principal && splitLengthPrefixed(principal[1]);
  const record = service && parseRecordMember(service[1]);
  return principal && service && record && { principalId: principal[0], service: service[0], ...record };
}

/** Parses recordMember back into scope and key. */
export function parseRecordMember(member: string): { scope: string; key: string } | null {
  const parts = splitLengthPrefixed(member);
  return parts && { scope: parts[0], key: parts[1] };
}

/** `<first's length>:<first>:<rest>`: the members' and targets' encoding (a scope or id may hold ':'). */
function lengthPrefixed(first: string, rest: string): string {
  return `${first.length}:${first}:${rest}`;
}

/** Splits lengthPrefixed back into first and rest; null for anything else. */
function splitLengthPrefixed(text: string): [string, string] | null {
  const colon = text.indexOf(':');
  const length = Number(text.slice(0, colon));
  if (colon < 1 || !Number.isInteger(length) || length < 0 || text[colon + 1 + length] !== ':') return null;
  return [text.slice(colon + 1, colon + 1 + length), text.slice(colon + 2 + length)];
}

/** A Lua script, by its SHA-1 (EVALSHA) and its text (EVAL, when the server's script cache lacks it). */
class Script {
  readonly sha: string;
  constructor(readonly lua: string) {
    this.sha = createHash('sha1').update(lua).digest('hex');
  }
}

// The Redis clock in milliseconds, as every script reads it first.
const NOW = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`;

// An existing record, read in one HMGET (its lease with its fields; a missing field is false):
// {0, lease remaining ms, state, fingerprint, correlation id, attempts, status, content type, body, key id, reference}.
const EXISTING = `local r = redis.call('HMGET', KEYS[1], 'state', 'fp', 'cid', 'att', 'status', 'ctype', 'body', 'kid', 'ref', 'lease')
local out = {0, tonumber(r[10] or '0') - now}
for i = 1, 9 do out[i + 2] = r[i] end
return out`;

/**
 * The claim. KEYS[1] the record, KEYS[2] the principal's index (principalIndexKey), on one server
 * also KEYS[3] the scope's in-flight index (inFlightIndexKey) and KEYS[4] the correlation id's
 * (correlationIndexKey); ARGV fingerprint, correlation id, lease ms, retention ms, the record's
 * member, then with KEYS[3] the in-flight member and the correlation target. On a cluster KEYS[3]
 * is the principal's in-flight set (principalInFlightKey, in the record's slot) and there is no
 * KEYS[4]: the set then expires as the principal's index does. A new record: {1}, in
 * progress with attempt 1, expiring after the retention, and in the indexes. An existing one: {0,
 * lease remaining ms, state, fingerprint, correlation id, attempts, status, content type, body,
 * key id, reference}.
 */
const CLAIM = new Script(`${NOW}
if redis.call('EXISTS', KEYS[1]) == 0 then
  local retention = tonumber(ARGV[4])
  local lease = now + tonumber(ARGV[3])
  redis.call('HSET', KEYS[1], 'state', 'in_progress', 'fp', ARGV[1], 'cid', ARGV[2], 'att', 1,
    'lease', lease, 'created', now, 'expires', now + retention)
  redis.call('PEXPIRE', KEYS[1], retention)
  redis.call('ZADD', KEYS[2], now, ARGV[5])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - retention))
  if redis.call('PTTL', KEYS[2]) < retention then redis.call('PEXPIRE', KEYS[2], retention) end
  if KEYS[3] then
    redis.call('ZADD', KEYS[3], lease, ARGV[6])
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. (now - retention))
    if KEYS[4] then
      redis.call('SET', KEYS[4], ARGV[7], 'PX', retention)
    elseif redis.call('PTTL', KEYS[3]) < retention then
      redis.call('PEXPIRE', KEYS[3], retention)
    end
  end
  return {1}
end
${EXISTING}`);

/** A read of one record, as the claim returns an existing one; nil when there is none. */
const READ = new Script(`${NOW}
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
${EXISTING}`);

/**
 * The takeover of a failed record or one whose lease has passed, if its attempt number is still
 * ARGV[1] (of many concurrent takers exactly one succeeds). ARGV fingerprint, correlation id,
 * lease ms follow; on one server KEYS[2] the in-flight index and KEYS[3] the new correlation id's,
 * ARGV the in-flight member and the correlation target (see CLAIM); on a cluster KEYS[2] the
 * principal's in-flight set (given an expiry no shorter than the record's: the failure mark may
 * have removed its last entry, and the set with it) and ARGV the record's member. The record keeps its creation
 * time and expiry (the new correlation id's entry expires with it). The new attempt number, or nil.
 */
const TAKE_OVER = new Script(`${NOW}
local r = redis.call('HMGET', KEYS[1], 'state', 'att', 'lease')
if not r[1] or tonumber(r[2]) ~= tonumber(ARGV[1]) then return false end
if r[1] == 'failed' or (r[1] == 'in_progress' and tonumber(r[3]) <= now) then
  local attempts = tonumber(r[2]) + 1
  local lease = now + tonumber(ARGV[4])
  redis.call('HDEL', KEYS[1], 'status', 'ctype', 'body', 'kid', 'size', 'ref', 'completed')
  redis.call('HSET', KEYS[1], 'state', 'in_progress', 'fp', ARGV[2], 'cid', ARGV[3], 'att', attempts, 'lease', lease)
  if KEYS[2] then
    redis.call('ZADD', KEYS[2], lease, ARGV[5])
    local ttl = redis.call('PTTL', KEYS[1])
    if KEYS[3] then
      if ttl > 0 then redis.call('SET', KEYS[3], ARGV[6], 'PX', ttl) end
    elseif ttl > 0 and redis.call('PTTL', KEYS[2]) < ttl then
      redis.call('PEXPIRE', KEYS[2], ttl)
    end
  end
  return attempts
end
return false`);

// The fence of a completion and a failure mark: the record is in progress with attempt ARGV[1],
// and, when ARGV[2] is not empty, that attempt is the claim of correlation id ARGV[2]. The attempt
// number alone is not enough on Redis: replication is asynchronous, so a failover can leave two
// records of one key with the same attempt number, each a different request's claim (a stalled or
// restarted master that still believes it masters the slot runs a claim on its stale data, while
// the promoted replica holds another request's claim). A mark the client delivers to the other
// node (the slot moved in between) must not fail or complete the claim it did not make.
const FENCE = `local r = redis.call('HMGET', KEYS[1], 'state', 'att', 'cid')
if r[1] ~= 'in_progress' or tonumber(r[2]) ~= tonumber(ARGV[1]) or (ARGV[2] ~= '' and r[3] ~= ARGV[2]) then return 0 end`;

/**
/**
 * The completion, if attempt ARGV[1] (of correlation id ARGV[2], when given) still holds the claim
 * (FENCE). ARGV status, content type, size, then 'body' with the sealed body and its key id, or
 * 'ref' with the reference; on one server KEYS[2] the in-flight index and ARGV[9] the in-flight
 * member, removed. 1 when recorded, 0 when superseded (or gone).
 */
const COMPLETE = new Script(`${NOW}
${FENCE}
redis.call('HDEL', KEYS[1], 'lease')
if ARGV[6] == 'body' then
  redis.call('HSET', KEYS[1], 'state', 'completed', 'status', ARGV[3], 'ctype', ARGV[4], 'size', ARGV[5], 'completed', now, 'body', ARGV[7], 'kid', ARGV[8])
else
  redis.call('HSET', KEYS[1], 'state', 'completed', 'status', ARGV[3], 'ctype', ARGV[4], 'size', ARGV[5], 'completed', now, 'ref', ARGV[7])
end
if KEYS[2] then redis.call('ZREM', KEYS[2], ARGV[9]) end
return 1`);

/**
 * Marks attempt ARGV[1] (of correlation id ARGV[2], when given) failed and retryable, if it still
 * holds the claim (FENCE); on one server KEYS[2] the in-flight index and ARGV[3] the member, removed. 1 or 0.
 */
const FAIL = new Script(`${FENCE}
redis.call('HDEL', KEYS[1], 'lease')
redis.call('HSET', KEYS[1], 'state', 'failed')
if KEYS[2] then redis.call('ZREM', KEYS[2], ARGV[3]) end
return 1`);

/** The scripts' texts, for tests and tools. */
export const redisScriptTexts = { claim: CLAIM.lua, read: READ.lua, takeOver: TAKE_OVER.lua, complete: COMPLETE.lua, fail: FAIL.lua };

/**
 * Redis could not take the command now: the connection is down or was cut, the server is loading,
 * busy, read-only after a failover, or out of memory under `noeviction`. The HTTP layer answers 503
 * with Retry-After (isDatabaseUnavailable), as for a Postgres that cannot be reached.
 */
export class RedisUnavailableError extends Error {
  readonly code = 'REDIS_UNAVAILABLE';
  constructor(
    readonly unavailableReason: UnavailableReason,
    cause: unknown,
  ) {
    super(`Redis is unavailable (${unavailableReason}): ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'RedisUnavailableError';
  }
}

// A cluster adds: no root node reachable (at a reconnection), a node's connection destroyed by
// the client when a topology refresh drops the node (a failed master: its pending commands are
// rejected with "Disconnects client", written or not), and a slot still moving after the client
// followed as many redirections as it allows. A reply that did not come in time ("Command timed
// out ... may have been executed") says as little of the outcome as a cut connection.
const CONNECTION_MESSAGES = /^(The client is offline|Socket closed unexpectedly|Connection timeout|Connection dropped|Socket timeout|The client is closed|All the root nodes are unavailable|Disconnects client|Command timed out)/;
const SLOT_MOVING = /^Too many Cluster redirections/;
const SERVER_STATES: readonly [RegExp, UnavailableReason][] = [
  [/^OOM /, 'capacity'],
  // A cluster whose slot has no master (CLUSTERDOWN) or is moving (MOVED, ASK, TRYAGAIN, when not followed).
  [/^(LOADING|BUSY|MASTERDOWN|READONLY|TRYAGAIN|CLUSTERDOWN|MOVED|ASK) /, 'shutdown'],
];

/** Why `error` says Redis cannot take the command now, or null when it says something else. */
export function redisUnavailableReason(error: unknown): UnavailableReason | null {
  if (!(error instanceof Error)) return null;
  if (error instanceof RedisUnavailableError) return error.unavailableReason;
  if (error instanceof ErrorReply) return SERVER_STATES.find(([pattern]) => pattern.test(error.message))?.[1] ?? null;
  if (SLOT_MOVING.test(error.message)) return 'shutdown';
  if (CONNECTION_MESSAGES.test(error.message)) return /timeout|timed out/i.test(error.message) ? 'timeout' : 'connection';
  const code: unknown = (error as { code?: unknown }).code;
  if (typeof code === 'string' && ['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN'].includes(code)) return 'connection';
  if (code === 'ETIMEDOUT') return 'timeout';
  return null;
}

function isNoScript(error: unknown): boolean {
  return error instanceof ErrorReply && error.message.startsWith('NOSCRIPT');
}

function text(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  return typeof value === 'string' || typeof value === 'number' ? String(value) : null;
}

function int(value: unknown): number {
  if (typeof value === 'number') return value;
  return Number(text(value));
}

const STATES: ReadonlySet<string> = new Set(['in_progress', 'completed', 'failed']);

/** A record as a claim or a read returned it ({0, lease remaining ms, ...fields}). */
function toExisting(reply: readonly unknown[]): ExistingKey {
  const [, leaseRemaining, state, fp, cid, attempts, status, contentType, body, keyId, ref] = reply;
  const stateText = text(state);
  if (stateText === null || !STATES.has(stateText) || !Buffer.isBuffer(fp)) throw new Error('a Redis key record without a state or fingerprint (not written by this store?)');
  const remainingMs = int(leaseRemaining);
  const inProgress = stateText === 'in_progress';
  return {
    state: stateText as ExistingKey['state'],
    fingerprint: fp,
    correlationId: text(cid) ?? '',
    attempts: int(attempts),
    // Redis removes a record once its retention has passed: what is found is within it.
    expired: false,
    leaseExpired: inProgress && remainingMs <= 0,
    leaseRemainingSeconds: inProgress ? Math.max(0, Math.ceil(remainingMs / 1000)) : 0,
    responseStatus: status === null || status === undefined ? null : int(status),
    responseContentType: text(contentType),
    responseBody: Buffer.isBuffer(body) ? body : null,
    responseKeyId: text(keyId),
    responseRef: text(ref),
  };
}

/** A database the work is given as `context.db` when none was: every query fails, naming why. */
const NO_DATABASE: Queryable = {
  query: () => Promise.reject(new Error('This Redis backend was given no Postgres pool (`db`) for the work to use')),
};

export interface RedisBackendOptions {
  /** What the work and a re-derivation get as `context.db` (createRetrysafe: its Postgres pool). */
  db?: Queryable;
  /**
   * Replicas that must acknowledge a claim (and a takeover) before the work may run: after the
   * claim the backend sends `WAIT waitReplicas waitTimeoutMs` on the connection that wrote it. Fewer
   * acknowledgements in time: the claim is marked failed (retryable) and the request is refused
   * as unavailable (503), the work not run. Completions wait too; a completion short of replicas
   * is still answered (its effect happened) and told to onWaitShortfall. 0 (default): no WAIT.
   * Replication stays asynchronous: see docs/redis.md for what this narrows and what it does not.
   */
  waitReplicas?: number;
  /** How long WAIT waits for the replicas (default 100 ms). */
  waitTimeoutMs?: number;
  /** Told each write that fewer than waitReplicas replicas acknowledged in time. */
  onWaitShortfall?: (operation: 'claim' | 'takeover' | 'complete', acknowledged: number) => void;
  /**
   * Keep the dashboard's indexes, written by the same scripts (one round trip still). On one
   * server: the claims in flight of each scope and the correlation ids (inFlightIndexKey,
   * correlationIndexKey), which the stale-claims list and the lookup by correlation id read. On a
   * cluster only each principal's claims in flight (principalInFlightKey, in the record's slot):
   * the stale-claims list reads it; a correlation id's entry would sit outside the record's slot,
   * so a cluster keeps none (docs/redis.md). Default: on.
   */
  dashboardIndexes?: boolean;
}

/** Fewer replicas than required acknowledged a claim in time: the work did not run, a retry may. */
export class ReplicationShortfallError extends Error {
  readonly code = 'REDIS_REPLICATION_SHORTFALL';
  constructor(
    readonly required: number,
    readonly acknowledged: number,
    timeoutMs: number,
  ) {
    super(`WAIT: ${acknowledged} of ${required} Redis replicas acknowledged the claim within ${timeoutMs} ms`);
    this.name = 'ReplicationShortfallError';
  }
}

/**
 * Key records in Redis (see the module's comment). `redis`: a connected node-redis client whose
 * bulk strings are mapped to Buffers (connectRedis opens one), not closed here.
 */
export class RedisBackend implements IdempotencyBackend {
  /** Claim-first only: the store refuses a transactional request on this backend (TransactionsUnsupportedError). */
  readonly transactional = false;
  readonly db: Queryable;
  private readonly waitReplicas: number;
  private readonly waitTimeoutMs: number;
  /** Which dashboard indexes the scripts keep (dashboardIndexes): one server's, a cluster's, or none. */
  private readonly indexes: 'server' | 'cluster' | 'none';

  constructor(
    private readonly redis: RedisCommands,
    private readonly options: RedisBackendOptions = {},
  ) {
    this.db = options.db ?? NO_DATABASE;
    this.waitReplicas = options.waitReplicas ?? 0;
    this.waitTimeoutMs = options.waitTimeoutMs ?? 100;
    this.indexes = options.dashboardIndexes === false ? 'none' : redis.eachMaster === undefined ? 'server' : 'cluster';
    if (!Number.isInteger(this.waitReplicas) || this.waitReplicas < 0) throw new RangeError('waitReplicas must be a whole number, 0 or more');
    if (!Number.isInteger(this.waitTimeoutMs) || this.waitTimeoutMs < 1) throw new RangeError('waitTimeoutMs must be a whole number of milliseconds, 1 or more');
  }

  /**
   * Sends one command and, pipelined behind it on the same connection, `WAIT waitReplicas
   * waitTimeoutMs`: the reply and how many replicas acknowledged every write sent on that
   * connection so far, this one included. One round trip.
   */
  private sendAndWait(args: readonly (string | Buffer)[], key: string): Promise<[unknown, number]> {
    if (this.redis.sendAndWait) return this.redis.sendAndWait(args, key, this.waitReplicas, this.waitTimeoutMs);
    // One server, one connection: node-redis writes the two commands in order on it.
    // A WAIT that fails confirms no replica (0): the caller decides what a shortfall means.
    return Promise.all([this.redis.sendCommand(args), this.redis.sendCommand(['WAIT', String(this.waitReplicas), String(this.waitTimeoutMs)]).then(int, () => 0)]);
  }

  /** Runs a script by its SHA-1, sending its text once when the server does not have it (restart, failover, SCRIPT FLUSH). */
  private async run(script: Script, keys: string | readonly string[], args: readonly (string | Buffer)[]): Promise<unknown> {
    return (await this.runWith(script, keys, args, (command) => this.redis.sendCommand(command)));
  }

  /** As run(), with WAIT behind the script (sendAndWait): its reply and the replicas that acknowledged it. */
  private runReplicated(script: Script, keys: string | readonly string[], args: readonly (string | Buffer)[]): Promise<[unknown, number]> {
    return this.runWith(script, keys, args, (command) => this.sendAndWait(command, typeof keys === 'string' ? keys : (keys[0] ?? '')));
  }

  private async runWith<T>(script: Script, keys: string | readonly string[], args: readonly (string | Buffer)[], send: (command: readonly (string | Buffer)[]) => Promise<T>): Promise<T> {
    const named = typeof keys === 'string' ? ['1', keys] : [String(keys.length), ...keys];
    try {
      return await send(['EVALSHA', script.sha, ...named, ...args]);
    } catch (error) {
      if (!isNoScript(error)) throw unavailable(error);
      try {
        return await send(['EVAL', script.lua, ...named, ...args]);
      } catch (again) {
        throw unavailable(again);
      }
    }
  }

  /**
   * A claim or a takeover of attempt `attempts` that fewer than waitReplicas replicas acknowledged:
   * marks the attempt failed (a retry may take it over at once) and refuses the request (503).
   */
  private async shortOfReplicas(operation: 'claim' | 'takeover', claim: ClaimValues, attempts: number, acknowledged: number): Promise<never> {
    this.options.onWaitShortfall?.(operation, acknowledged);
    // Fenced by the claim's correlation id too (FENCE), so it can fail only this claim.
    await this.fail(claim, attempts).catch(() => undefined);
    throw new RedisUnavailableError('timeout', new ReplicationShortfallError(this.waitReplicas, acknowledged, this.waitTimeoutMs));
  }

  async claim(claim: ClaimValues): Promise<ClaimResult> {
    const member = recordMember(claim.scope, claim.key);
    const keys = [`retrysafe:{${claim.principalId}:${claim.service}}:${member}`, principalIndexKey(claim.principalId, claim.service)];
    const args = [claim.fingerprint, claim.correlationId, String(Math.round(claim.leaseMs)), String(Math.round(claim.retentionMs)), member];
    if (this.indexes === 'server') {
      keys.push(inFlightIndexKey(claim.service, claim.scope), correlationIndexKey(claim.correlationId));
      args.push(inFlightMember(claim.principalId, claim.key), correlationTarget(claim));
    } else if (this.indexes === 'cluster') {
      keys.push(principalInFlightKey(claim.principalId, claim.service));
      args.push(member);
    }
    if (this.waitReplicas === 0) {
      const reply = (await this.run(CLAIM, keys, args)) as unknown[];
      return reply[0] === 1 ? { claimed: true, attempts: 1 } : { claimed: false, existing: toExisting(reply) };
    }
    const [reply, acknowledged] = (await this.runReplicated(CLAIM, keys, args)) as [unknown[], number];
    if (reply[0] !== 1) return { claimed: false, existing: toExisting(reply) };
    if (acknowledged < this.waitReplicas) await this.shortOfReplicas('claim', claim, 1, acknowledged);
    return { claimed: true, attempts: 1 };
  }

  async read(id: KeyIdentity): Promise<ExistingKey | null> {
    const reply = (await this.run(READ, recordKey(id), [])) as unknown[] | null;
    return reply ? toExisting(reply) : null;
  }

  async takeOver(claim: ClaimValues, seenAttempts: number): Promise<number | null> {
    const key = [recordKey(claim)];
    const args = [String(seenAttempts), claim.fingerprint, claim.correlationId, String(Math.round(claim.leaseMs))];
    if (this.indexes === 'server') {
      key.push(inFlightIndexKey(claim.service, claim.scope), correlationIndexKey(claim.correlationId));
      args.push(inFlightMember(claim.principalId, claim.key), correlationTarget(claim));
    } else if (this.indexes === 'cluster') {
      key.push(principalInFlightKey(claim.principalId, claim.service));
      args.push(recordMember(claim.scope, claim.key));
    }
    if (this.waitReplicas === 0) {
      const reply = await this.run(TAKE_OVER, key, args);
      return reply === null ? null : int(reply);
    }
    const [reply, acknowledged] = await this.runReplicated(TAKE_OVER, key, args);
    if (reply === null) return null;
    if (acknowledged < this.waitReplicas) await this.shortOfReplicas('takeover', claim, int(reply), acknowledged);
    return int(reply);
  }

  async complete(values: CompletionValues): Promise<boolean> {
    // (A reference takes the body's two places, so the in-flight member is ARGV[9] either way.)
    const stored: (string | Buffer)[] =
      values.body !== null && values.keyId !== null ? ['body', values.body, values.keyId] : ['ref', values.reference ?? '', ''];
    const args = [String(values.attempts), values.correlationId ?? '', String(values.status), values.contentType, String(values.size), ...stored];
    const keys = [recordKey(values)];
    if (this.indexes !== 'none') {
      keys.push(this.inFlightKey(values));
      args.push(this.inFlightEntry(values));
    }
    if (this.waitReplicas === 0) return (await this.run(COMPLETE, keys, args)) === 1;
    const [reply, acknowledged] = await this.runReplicated(COMPLETE, keys, args);
    // The effect happened: its answer goes out whatever the replicas say; a shortfall is reported.
    if (reply === 1 && acknowledged < this.waitReplicas) this.options.onWaitShortfall?.('complete', acknowledged);
    return reply === 1;
  }

  async fail(id: KeyIdentity & { correlationId?: string }, attempts: number): Promise<boolean> {
    const args = [String(attempts), id.correlationId ?? ''];
    if (this.indexes === 'none') return (await this.run(FAIL, recordKey(id), args)) === 1;
    return (await this.run(FAIL, [recordKey(id), this.inFlightKey(id)], [...args, this.inFlightEntry(id)])) === 1;
  }

  /** The in-flight index a claim of `id` is in: its scope's on one server, its principal's on a cluster. */
  private inFlightKey(id: KeyIdentity): string {
    return this.indexes === 'cluster' ? principalInFlightKey(id.principalId, id.service) : inFlightIndexKey(id.service, id.scope);
  }

  /** The claim's member in inFlightKey(id). */
  private inFlightEntry(id: KeyIdentity): string {
    return this.indexes === 'cluster' ? recordMember(id.scope, id.key) : inFlightMember(id.principalId, id.key);
  }

  transaction(): Promise<BackendTransaction> {
    return Promise.reject(new TransactionsUnsupportedError());
  }

  isLockTimeout(): boolean {
    return false;
  }

  /** A lost or refused connection, or a server that cannot take commands now: the fenced completion may be sent again. */
  isTransient(error: unknown): boolean {
    return redisUnavailableReason(error) !== null;
  }
}

function unavailable(error: unknown): unknown {
  const reason = redisUnavailableReason(error);
  return reason === null || error instanceof RedisUnavailableError ? error : new RedisUnavailableError(reason, error);
}

/** A node-redis client as the backend needs it, and its close(). */
export interface RedisConnection {
  commands: RedisCommands;
  close(): Promise<void>;
}

/**
 * Opens a node-redis client on `url` with bulk strings mapped to Buffers (sealed bodies and
 * fingerprints are binary), commands failing at once while disconnected (a 503, not a request
 * queued for an unknown time), and reconnection in the background once it has connected. A
 * Redis that cannot be reached at start fails the returned promise (a service does not start
 * half-configured, nor wait forever). `onError`: the client's connection errors.
 */
export async function connectRedis(url: string, options: { onError?: (error: unknown) => void; clientOptions?: RedisClientOptions } = {}): Promise<RedisConnection> {
  let connected = false;
  const client = createClient({
    url,
    disableOfflineQueue: true,
    ...options.clientOptions,
    socket: {
      connectTimeout: 5_000,
      // Before the first connection: give up (connect() rejects with the cause); after it: back off up to 2 s.
      reconnectStrategy: (retries: number, cause: Error) => (connected ? Math.min(50 * 2 ** retries, 2_000) : cause),
      ...options.clientOptions?.socket,
    },
  });
  client.on('error', (error: unknown) => options.onError?.(error));
  client.on('ready', () => {
    connected = true;
  });
  await client.connect();
  const binary = client.withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer });
  return {
    commands: { sendCommand: (args) => binary.sendCommand(args) },
    close: async () => {
      if (client.isOpen) await client.close();
    },
  };
}

export { RedisKeyReads, CLUSTER_CORRELATION_NOT_KEPT, CLUSTER_STALE_PRINCIPALS_MAX, type RedisMasterFigures, type RedisStoreFigures } from './redis-key-reads.js';
export { RedisReconciler, parseReconcileOptions, reconcileStatementTexts, type EffectQuery, type ReconcileOptions, type ReconcileRun, type ResolvedReconcileOptions } from './redis-reconcile.js';
export { connectRedisCluster, routingKey, type RedisClusterConnection } from './redis-cluster.js';
export { RedisMemoryWatch, readRedisMemory, readRedisMemoryOfEachServer, EvictingPolicyError, MEMORY_ALERT_RATIO, type RedisCommands, type RedisMemoryStatus, type RedisMemory, type RedisMemoryAlert, type RedisMemoryWatchOptions, type RedisNodeMemory } from './redis-memory.js';
