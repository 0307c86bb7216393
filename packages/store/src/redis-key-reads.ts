// The dashboard's key lookup and a principal's key list for key records kept in Redis, without
// SCAN: a lookup reads the record of each (service, scope) the published policies know (one
// pipelined HMGET each, as Postgres probes its primary key once per scope), and the list walks the
// principal's per-service index (a sorted set by creation time, written by the claim script)
// backwards from the cursor. Metadata only: every read is an HMGET of named metadata fields,
// never HGETALL, so the stored body never leaves Redis for the dashboard.
// Stale claims and a correlation id are read from the indexes the store's scripts keep on one
// server for the dashboard (redis.ts: inFlightIndexKey, a sorted set of a scope's claims in flight
// by lease expiry; correlationIndexKey, a string naming the record of a correlation id), each
// record then confirmed by its own HMGET. A release of a stale claim is the store's own takeover:
// the dashboard holds no write to Redis.
// On a Redis Cluster (a connection with eachMaster) the same reads go through the cluster client,
// each to its key's master; the stale claims come from each principal's in-flight set
// (principalInFlightKey, in the record's slot), the principals from Postgres's quota counters;
// there is no correlation-id index (it would sit outside the record's slot), and the store's
// figures are each master's INFO, summed, with the tightest master named.
import type { CorrelationRecord, KeyCursor, KeyListQuery, KeyLookupQuery, KeyPage, KeyRecord, KeyRecordReads, KeyState, KeySummary, StaleClaim, StaleClaimRelease } from './key-reads.js';
import { KEY_LIST_SCAN_ROWS, KeyReadUnsupportedError } from './key-reads.js';
import { infoFields, memoryOf, type RedisCommands } from './redis-memory.js';
import {
  correlationIndexKey,
  inFlightIndexKey,
  principalInFlightKey,
  parseCorrelationTarget,
  parseInFlightMember,
  parseRecordMember,
  principalIndexKey,
  recordKey,
  RedisUnavailableError,
  redisUnavailableReason,
} from './redis.js';
import { knownScopes, knownServices, principalsWithLiveKeys } from './key-scopes.js';
import type { Queryable } from './statements.js';

/** The metadata fields of a record, in this order: never 'body' (test/integration/dashboard-key-backends.test.ts checks the commands sent). */
const FIELDS = ['state', 'status', 'ctype', 'size', 'kid', 'ref', 'cid', 'created', 'completed', 'expires', 'lease', 'fp', 'att'] as const;

type Fields = (Buffer | null)[];

const str = (value: Buffer | null | undefined): string | null => (value ? value.toString('utf8') : null);
const num = (value: Buffer | null | undefined): number | null => (value ? Number(value.toString('latin1')) : null);
const iso = (ms: number) => new Date(ms).toISOString();

function toKeyRecord(service: string, scope: string, fields: Fields, nowMs: number): KeyRecord | null {
  const [state, status, ctype, size, kid, ref, cid, created, completed, expires, lease, fp, att] = fields;
  const stateText = str(state);
  const createdMs = num(created);
  const expiresMs = num(expires);
  if (stateText === null || createdMs === null || expiresMs === null) return null;
  const leaseMs = num(lease);
  const attempts = num(att) ?? 1;
  const completedMs = num(completed);
  return {
    service,
    scope,
    state: stateText as KeyState,
    statusCode: num(status),
    contentType: str(ctype),
    responseSize: num(size),
    storedAs: ref ? 'reference' : kid ? 'body' : null,
    correlationId: str(cid) ?? '',
    createdAt: iso(createdMs),
    completedAt: completedMs === null ? null : iso(completedMs),
    expiresAt: iso(expiresMs),
    secondsLeft: Math.max(0, Math.round((expiresMs - nowMs) / 1000)),
    leaseExpiresAt: leaseMs === null ? null : iso(leaseMs),
    leasePassedSeconds: stateText === 'in_progress' && leaseMs !== null && leaseMs < nowMs ? (nowMs - leaseMs) / 1000 : null,
    fingerprintPrefix: fp ? fp.subarray(0, 4).toString('hex') : '',
    attempts,
    takeovers: Math.max(0, attempts - 1),
  };
}

interface Candidate {
  service: string;
  scope: string;
  key: string;
  createdMs: number;
}

/** Newest first: created, then service, scope and key, descending (the Postgres list's order). */
function newerFirst(a: Candidate, b: Candidate): number {
  if (a.createdMs !== b.createdMs) return b.createdMs - a.createdMs;
  for (const field of ['service', 'scope', 'key'] as const) {
    if (a[field] !== b[field]) return a[field] < b[field] ? 1 : -1;
  }
  return 0;
}

/** Whether `candidate` comes after the cursor in newest-first order. */
function afterCursor(candidate: Candidate, cursor: KeyCursor): boolean {
  return newerFirst({ service: cursor.service, scope: cursor.scope, key: cursor.key, createdMs: Number(cursor.createdAtMicros) / 1000 }, candidate) < 0;
}

/** A WITHSCORES reply as (member, score) pairs: RESP3 gives [member, score] pairs, RESP2 a flat list. */
function withScores(reply: readonly unknown[]): [string, number][] {
  const pairs: [string, number][] = [];
  const text = (value: unknown) => (Buffer.isBuffer(value) ? value.toString('utf8') : String(value));
  if (reply.every(Array.isArray)) {
    for (const pair of reply as unknown[][]) pairs.push([text(pair[0]), Number(text(pair[1]))]);
  } else {
    for (let i = 0; i + 1 < reply.length; i += 2) pairs.push([text(reply[i]), Number(text(reply[i + 1]))]);
  }
  return pairs;
}

/**
 * What the overview shows of a Redis that keeps key records (RedisKeyReads.storeFigures): one
 * INFO, so it costs the same whatever the number of keys. Every key of the server counts in
 * `keys` (each record, its correlation id's entry and each principal's index), not one service's.
 */
export interface RedisStoreFigures {
  /** Keys of every database of the server (INFO keyspace). */
  keys: number;
  /** Keys with an expiry (every key the store writes has one, but the in-flight indexes). */
  keysWithExpiry: number;
  usedMemoryBytes: number;
  /** 0: no limit. */
  maxmemoryBytes: number;
  policy: string;
  /** Since the server started (or CONFIG RESETSTAT). */
  evictedKeys: number;
  /**
   * A cluster: each master's own figures (the numbers above are their sums, the policy their
   * distinct policies), and the one closest to its maxmemory. A master that fills refuses the
   * writes of its slots (or evicts) however empty the others are, so it is the one to watch.
   */
  masters?: RedisMasterFigures[];
  tightestMaster?: RedisMasterFigures;
}

/** One master's figures (RedisStoreFigures.masters). */
export interface RedisMasterFigures {
  /** host:port */
  node: string;
  keys: number;
  usedMemoryBytes: number;
  /** 0: no limit. */
  maxmemoryBytes: number;
  policy: string;
  evictedKeys: number;
}

/** Principals whose in-flight sets a cluster's stale-claims read reads at most, per service (the most recently active first). */
export const CLUSTER_STALE_PRINCIPALS_MAX = 1_000;

/** What a cluster's correlation-id lookup answers (KeyReadUnsupportedError's message). */
export const CLUSTER_CORRELATION_NOT_KEPT =
  "not kept for a Redis Cluster: the claim may write only its record's hash slot in its one round trip, and an index by correlation id would sit in another slot; look the key up by principal and key";

/** The keys of a server's INFO keyspace section, every database. */
function keyspaceOf(fields: Map<string, string>): { keys: number; keysWithExpiry: number } {
  let keys = 0;
  let keysWithExpiry = 0;
  for (const [name, value] of fields) {
    if (!/^db\d+$/.test(name)) continue;
    keys += Number(/(?:^|,)keys=(\d+)/.exec(value)?.[1] ?? 0);
    keysWithExpiry += Number(/(?:^|,)expires=(\d+)/.exec(value)?.[1] ?? 0);
  }
  return { keys, keysWithExpiry };
}

/** used/max of a master, 0 without a limit. */
const fullness = (master: RedisMasterFigures) => (master.maxmemoryBytes > 0 ? master.usedMemoryBytes / master.maxmemoryBytes : 0);

/** A claim in flight as an index names it (its record not read yet). */
interface InFlight {
  service: string;
  scope: string;
  principalId: string;
  key: string;
  leaseMs: number;
}

/** A cluster's in-flight sets read at once (the client pipelines each master's share). */
const CLUSTER_READ_CHUNK = 200;

/** How long a dashboard read waits for Redis before it answers unavailable (503), by default. */
export const REDIS_KEY_READ_TIMEOUT_MS = 5_000;

const cursorOf = (candidate: Candidate): KeyCursor => ({ createdAtMicros: String(candidate.createdMs * 1000), service: candidate.service, scope: candidate.scope, key: candidate.key });

/**
 * Key lookup and key list over Redis records. `db`: the Postgres that holds the policies (the
 * scopes a key may be stored under, and the services).
 */
export class RedisKeyReads implements KeyRecordReads {
  private readonly timeoutMs: number;
  /** A Redis Cluster (its commands have eachMaster): see the module's comment. */
  private readonly cluster: boolean;

  constructor(
    private readonly redis: RedisCommands,
    private readonly db: Queryable,
    options: { timeoutMs?: number } = {},
  ) {
    this.timeoutMs = options.timeoutMs ?? REDIS_KEY_READ_TIMEOUT_MS;
    this.cluster = redis.eachMaster !== undefined;
  }

  /**
   * One command, bounded: a Redis that does not answer within timeoutMs, or whose failure says it
   * cannot take commands now (offline, connection cut, LOADING...), is a RedisUnavailableError
   * (the route's 503 with Retry-After), not the driver's own error (a 500).
   */
  private send(args: string[]): Promise<unknown> {
    return this.bounded(() => this.redis.sendCommand(args));
  }

  private async bounded<T>(read: () => Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new RedisUnavailableError('timeout', new Error(`no answer in ${this.timeoutMs} ms`))), this.timeoutMs);
    });
    try {
      return await Promise.race([read(), timeout]);
    } catch (error) {
      const reason = redisUnavailableReason(error);
      throw reason === null || error instanceof RedisUnavailableError ? error : new RedisUnavailableError(reason, error);
    } finally {
      clearTimeout(timer);
    }
  }

  private async now(): Promise<number> {
    const [seconds, micros] = (await this.send(['TIME'])) as Buffer[];
    return Number(seconds?.toString()) * 1000 + Math.floor(Number(micros?.toString()) / 1000);
  }

  private fields(principalId: string, service: string, scope: string, key: string): Promise<Fields> {
    return this.send(['HMGET', recordKey({ principalId, service, scope, key }), ...FIELDS]) as Promise<Fields>;
  }

  async keyRecords(query: KeyLookupQuery): Promise<KeyRecord[]> {
    const rows = await knownScopes(this.db, query.service);
    const [now, ...found] = await Promise.all([this.now(), ...rows.map((row) => this.fields(query.principalId, row.service, row.scope, query.key))]);
    const records: KeyRecord[] = [];
    rows.forEach((row, i) => {
      const record = toKeyRecord(row.service, row.scope, found[i] ?? [], now);
      if (record) records.push(record);
    });
    return records;
  }

  async principalKeys(query: KeyListQuery): Promise<KeyPage> {
    const services = query.service !== undefined ? [query.service] : await knownServices(this.db);
    const max = query.after ? String(Number(query.after.createdAtMicros) / 1000) : '+inf';
    // Each service's index from the cursor backwards (ties at the cursor's instant included, then
    // filtered), at most the scan bound each; merged into one newest-first order.
    const indexes = await Promise.all(
      services.map((service) => this.send(['ZRANGE', principalIndexKey(query.principalId, service), max, '-inf', 'BYSCORE', 'REV', 'LIMIT', '0', String(KEY_LIST_SCAN_ROWS), 'WITHSCORES']) as Promise<unknown[]>),
    );
    const candidates: Candidate[] = [];
    indexes.forEach((reply, s) => {
      const service = services[s] ?? '';
      for (const [memberText, score] of withScores(reply)) {
        const member = parseRecordMember(memberText);
        if (!member) continue;
        const candidate = { service, ...member, createdMs: score };
        if (!query.after || afterCursor(candidate, query.after)) candidates.push(candidate);
      }
    });
    candidates.sort(newerFirst);
    const examined = candidates.slice(0, KEY_LIST_SCAN_ROWS);
    const now = await this.now();
    const matches: KeySummary[] = [];
    const matched: Candidate[] = [];
    // In chunks (pipelined), stopping at one match more than the page.
    const chunk = Math.max(16, query.limit + 1);
    let read = 0;
    for (; read < examined.length && matches.length <= query.limit; read += chunk) {
      const part = examined.slice(read, read + chunk);
      const found = await Promise.all(part.map((c) => this.fields(query.principalId, c.service, c.scope, c.key)));
      part.forEach((candidate, i) => {
        if (matches.length > query.limit) return;
        const record = toKeyRecord(candidate.service, candidate.scope, found[i] ?? [], now);
        if (!record || Date.parse(record.expiresAt) <= now) return; // gone (expired or evicted)
        if (query.scope !== undefined && record.scope !== query.scope) return;
        if (query.state !== undefined && record.state !== query.state) return;
        matches.push({ service: record.service, scope: record.scope, key: candidate.key, state: record.state, statusCode: record.statusCode, createdAt: record.createdAt, expiresAt: record.expiresAt });
        matched.push(candidate);
      });
    }
    const page = matches.slice(0, query.limit);
    const last = matched[page.length - 1];
    let next: KeyCursor | null = null;
    let searchedBackTo: string | null = null;
    const bound = examined.length === KEY_LIST_SCAN_ROWS ? examined.at(-1) : undefined;
    if (matches.length > query.limit && last) next = cursorOf(last);
    else if (bound && read >= examined.length) {
      next = cursorOf(bound);
      if (page.length < query.limit) searchedBackTo = iso(bound.createdMs);
    }
    return { keys: page, next, searchedBackTo };
  }

  /**
   * The record the correlation id's index names (GET), if it still has that id (a takeover gives
   * the record a new one), with its principal's name from Postgres: at most one record.
   */
  async correlationRecords(correlationId: string): Promise<CorrelationRecord[]> {
    if (this.cluster) throw new KeyReadUnsupportedError(CLUSTER_CORRELATION_NOT_KEPT);
    const target = (await this.send(['GET', correlationIndexKey(correlationId)])) as Buffer | null;
    const id = target ? parseCorrelationTarget(target.toString('utf8')) : null;
    if (!id) return [];
    const [now, fields] = await Promise.all([this.now(), this.fields(id.principalId, id.service, id.scope, id.key)]);
    const record = toKeyRecord(id.service, id.scope, fields, now);
    if (!record || record.correlationId !== correlationId || Date.parse(record.expiresAt) <= now) return [];
    const { rows } = await this.db.query<{ name: string }>({ text: 'SELECT name FROM retrysafe.principal_names WHERE principal_id = $1', values: [id.principalId] });
    return [{ principalId: id.principalId, principalName: rows[0]?.name ?? null, key: id.key, ...record }];
  }

  /**
   * Claims past their lease, oldest lease first: of each (service, scope) the policies know, the
   * in-flight index's entries whose lease ended before now (a ZRANGE by score, at most `limit`
   * each), merged, then each confirmed by its record (HMGET, in chunks, until `limit` are found):
   * an entry whose record has expired, completed or moved on to a later lease is passed over.
   */
  async staleClaims(limit: number, service?: string): Promise<StaleClaim[]> {
    const now = await this.now();
    const candidates = this.cluster ? await this.clusterInFlight(limit, now, service) : await this.serverInFlight(limit, now, service);
    candidates.sort((a, b) => a.leaseMs - b.leaseMs);
    const claims: StaleClaim[] = [];
    const chunk = Math.max(16, limit);
    for (let read = 0; read < candidates.length && claims.length < limit; read += chunk) {
      const part = candidates.slice(read, read + chunk);
      const found = await Promise.all(part.map((c) => this.fields(c.principalId, c.service, c.scope, c.key)));
      part.forEach((candidate, i) => {
        const record = toKeyRecord(candidate.service, candidate.scope, found[i] ?? [], now);
        if (!record || claims.length >= limit || record.leasePassedSeconds === null || Date.parse(record.expiresAt) <= now) return;
        claims.push({
          principalId: candidate.principalId,
          service: candidate.service,
          scope: candidate.scope,
          key: candidate.key,
          createdAt: record.createdAt,
          leaseExpiredAt: record.leaseExpiresAt ?? new Date(candidate.leaseMs).toISOString(),
          pastLeaseSeconds: Math.round(record.leasePassedSeconds),
          attempts: record.attempts,
          correlationId: record.correlationId,
        });
      });
    }
    return claims;
  }

  /** One server: each scope's in-flight index up to now (inFlightIndexKey), at most `limit` entries each. */
  private async serverInFlight(limit: number, now: number, service: string | undefined): Promise<InFlight[]> {
    const scopes = await knownScopes(this.db, service);
    const ranges = await Promise.all(
      scopes.map(
        (pair) => this.send(['ZRANGE', inFlightIndexKey(pair.service, pair.scope), '-inf', `(${now}`, 'BYSCORE', 'LIMIT', '0', String(limit), 'WITHSCORES']) as Promise<unknown[]>,
      ),
    );
    const candidates: InFlight[] = [];
    ranges.forEach((reply, i) => {
      const pair = scopes[i];
      if (!pair) return;
      for (const [memberText, leaseMs] of withScores(reply)) {
        const member = parseInFlightMember(memberText);
        if (member) candidates.push({ ...pair, ...member, leaseMs });
      }
    });
    return candidates;
  }

  /**
   * A cluster: of each service (the one named, or every one with a policy), the principals with
   * live keys from Postgres (principalsWithLiveKeys, at most CLUSTER_STALE_PRINCIPALS_MAX), then
   * each principal's in-flight set up to now (principalInFlightKey: ZRANGE by score, at most
   * `limit` entries each). The cluster client pipelines the ZRANGEs of one master on its
   * connection; sent a chunk at a time, so the read stays bounded however many principals.
   */
  private async clusterInFlight(limit: number, now: number, service: string | undefined): Promise<InFlight[]> {
    const services = service !== undefined ? [service] : await knownServices(this.db);
    const sets = (await Promise.all(services.map(async (name) => (await principalsWithLiveKeys(this.db, name, CLUSTER_STALE_PRINCIPALS_MAX)).map((principalId) => ({ service: name, principalId }))))).flat();
    const candidates: InFlight[] = [];
    for (let read = 0; read < sets.length; read += CLUSTER_READ_CHUNK) {
      const part = sets.slice(read, read + CLUSTER_READ_CHUNK);
      const ranges = await Promise.all(
        part.map((set) => this.send(['ZRANGE', principalInFlightKey(set.principalId, set.service), '-inf', `(${now}`, 'BYSCORE', 'LIMIT', '0', String(limit), 'WITHSCORES']) as Promise<unknown[]>),
      );
      ranges.forEach((reply, i) => {
        const set = part[i];
        if (!set) return;
        for (const [memberText, leaseMs] of withScores(reply)) {
          const member = parseRecordMember(memberText);
          if (member) candidates.push({ service: set.service, principalId: set.principalId, ...member, leaseMs });
        }
      });
    }
    return candidates;
  }

  /** The server's keys and memory in one INFO (memory, stats, keyspace), each master's on a cluster: no key is read. */
  async storeFigures(): Promise<RedisStoreFigures> {
    if (!this.redis.eachMaster) {
      const fields = infoFields(await this.send(['INFO', 'memory', 'stats', 'keyspace']));
      const memory = memoryOf(fields);
      return { ...keyspaceOf(fields), ...memory, policy: memory.policy ?? 'unknown' };
    }
    const eachMaster = this.redis.eachMaster.bind(this.redis);
    const masters = await this.bounded(async () =>
      Promise.all(
        (await eachMaster()).map(async (master) => {
          const fields = infoFields(await master.commands.sendCommand(['INFO', 'memory', 'stats', 'keyspace']));
          const memory = memoryOf(fields);
          return { node: master.node, ...keyspaceOf(fields), ...memory, policy: memory.policy ?? 'unknown' };
        }),
      ),
    );
    const sum = (field: 'keys' | 'keysWithExpiry' | 'usedMemoryBytes' | 'maxmemoryBytes' | 'evictedKeys') => masters.reduce((total, master) => total + master[field], 0);
    const figures = masters.map(({ keysWithExpiry: _, ...master }): RedisMasterFigures => master);
    const tightest = [...figures].sort((a, b) => fullness(b) - fullness(a) || b.usedMemoryBytes - a.usedMemoryBytes)[0];
    return {
      keys: sum('keys'),
      keysWithExpiry: sum('keysWithExpiry'),
      usedMemoryBytes: sum('usedMemoryBytes'),
      maxmemoryBytes: sum('maxmemoryBytes'),
      evictedKeys: sum('evictedKeys'),
      policy: [...new Set(figures.map((master) => master.policy))].sort().join(', ') || 'unknown',
      masters: figures,
      ...(tightest ? { tightestMaster: tightest } : {}),
    };
  }

  /** The dashboard holds no write to Redis: a stale claim there is taken over by the next retry once its lease has passed. */
  releaseStaleClaim(): Promise<StaleClaimRelease> {
    return Promise.reject(new KeyReadUnsupportedError('A stale claim of a Redis-backed service is not released from the dashboard: the next retry takes it over once its lease has passed'));
  }
}
