// Dual-write reconciliation for key records kept in Redis (issue 27.5): the claim lives in Redis,
// the effect in the service's own database, and no transaction spans both. Every interval one
// instance of the service (a transaction-scoped advisory lock in Postgres) samples its records
// within a budget, asks the adopter's effectExists about each completed key and each claim past
// its lease, and keeps what it found in Postgres (reconcile_findings, reconcile_runs; migration
// 0027) for the Retrysafe server's dashboard and /api/metrics. Metadata only: records are read with
// HMGET of named fields, never the body or the fingerprint. Sampling: a SCAN of the service's
// per-principal indexes (MATCH retrysafe:{*:<service>}:keys, TYPE zset), resumed from its cursor
// run after run, and ZRANDMEMBER of each index found; first, the findings already kept are
// checked again (least recently checked first), so one that resolves leaves the list.
import type pg from 'pg';
import type { RedisCommands } from './redis-memory.js';

/** What effectExists is asked about: one key record's metadata (never its body). */
export interface EffectQuery {
  principalId: string;
  service: string;
  scope: string;
  key: string;
  /** The attempt's correlation id (X-Correlation-Id): what its work ran under (`context.correlationId`). */
  correlationId: string;
  /** The stored reference of a completion kept by reference (a response over its cap), else null. */
  reference: string | null;
  /** completed, or in_progress past its lease (a stale claim). */
  state: 'completed' | 'in_progress';
}

/**
 * The reconciler of a Redis-kept service (`createRetrysafe({ redis: { url, reconcile } })`).
 * The effect lives in your database, the claim in Redis: this finds where they disagree.
 */
export interface ReconcileOptions {
  /**
   * Whether the effect of this key's work exists in your database (e.g. an order row written
   * with this correlation id). Runs in your service's process; it must only read. A throw or a
   * timeout is counted and told to onError, never a finding and never a crash.
   */
  effectExists: (query: EffectQuery) => Promise<boolean> | boolean;
  /** How often one instance of the service runs it (default 60 s). */
  intervalMs?: number;
  /** Records read from Redis per run, re-checks included, each at most one effectExists call (default 200). */
  budget?: number;
  /** A completed key is checked once it completed this long ago: effects written after the completion, or read from a replica, have time to land (default 10 s). */
  settleMs?: number;
  /** An effectExists call that takes longer counts as an error (default 5 s). */
  effectTimeoutMs?: number;
  /** At most this many findings kept for the service; beyond, they are counted as unlisted (default 1,000). */
  maxFindings?: number;
}

/** Each numeric option: its default and bounds (whole milliseconds or counts). */
const NUMERIC_OPTIONS = {
  intervalMs: { fallback: 60_000, min: 1_000, max: 86_400_000 },
  budget: { fallback: 200, min: 1, max: 10_000 },
  settleMs: { fallback: 10_000, min: 0, max: 86_400_000 },
  effectTimeoutMs: { fallback: 5_000, min: 1, max: 600_000 },
  maxFindings: { fallback: 1_000, min: 1, max: 100_000 },
} as const;

/** The reconcile options with every default filled in (parseReconcileOptions). */
export type ResolvedReconcileOptions = Required<ReconcileOptions>;

/**
 * Validates the reconcile options: a TypeError naming each wrong field (and any unknown one).
 * Checked by hand, as the package's other options are: it needs no validation library at run time.
 */
export function parseReconcileOptions(options: unknown): ResolvedReconcileOptions {
  if (typeof options !== 'object' || options === null) throw new TypeError('redis.reconcile: options: must be an object with effectExists');
  const given = options as Record<string, unknown>;
  const problems: string[] = [];
  if (typeof given.effectExists !== 'function') problems.push('effectExists: effectExists must be a function');
  const resolved: Record<string, unknown> = { effectExists: given.effectExists };
  for (const [name, rule] of Object.entries(NUMERIC_OPTIONS)) {
    const value = given[name];
    if (value === undefined) resolved[name] = rule.fallback;
    else if (typeof value !== 'number' || !Number.isInteger(value) || value < rule.min || value > rule.max) problems.push(`${name}: a whole number from ${rule.min} to ${rule.max}`);
    else resolved[name] = value;
  }
  for (const name of Object.keys(given)) if (name !== 'effectExists' && !(name in NUMERIC_OPTIONS)) problems.push(`${name}: unknown option`);
  if (problems.length > 0) throw new TypeError(`redis.reconcile: ${problems.join('; ')}`);
  return resolved as unknown as ResolvedReconcileOptions;
}

/** What one run did. */
export interface ReconcileRun {
  /** skipped: another instance of the service held the run's lock. */
  status: 'completed' | 'skipped';
  /** Records read from Redis (re-checks and samples). */
  examined: number;
  effectChecks: number;
  effectErrors: number;
  /** Findings kept after the run, by kind. */
  effectMissing: number;
  staleClaims: number;
  /** Findings this run removed (resolved: effect found, key completed, taken over or expired). */
  cleared: number;
  /** Findings not kept because the service's list was at maxFindings. */
  unlisted: number;
  /** The SCAN went round the whole keyspace (of every master, on a cluster) in this run and starts again. */
  passCompleted: boolean;
}

/** The run's re-check of its service's findings, least recently checked first: a range of reconcile_findings_service_idx (service, checked_at) in order, stopped at $2. */
const RECHECK_TEXT = 'SELECT principal_id, scope, key FROM retrysafe.reconcile_findings WHERE service = $1 ORDER BY checked_at LIMIT $2';

/** The run's statements whose plans a test proves. */
export const reconcileStatementTexts = { recheck: RECHECK_TEXT };

/** pg_try_advisory_xact_lock's first key ("rsrc"); the second is hashtext(service). */
const RECONCILE_LOCK_CLASS = 0x72737263;

/** Metadata fields read of each record, in this order: never 'body' or 'fp'. */
const FIELDS = ['state', 'cid', 'ref', 'att', 'created', 'completed', 'expires', 'lease'] as const;
/** SCAN's COUNT hint, and how many SCAN calls (per server) a run may make. */
const SCAN_COUNT = 500;
const SCAN_CALLS_PER_RUN = 8;
/** Members sampled from one principal's index per run. */
const PER_INDEX = 16;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

interface Candidate {
  principalId: string;
  scope: string;
  key: string;
}

interface Finding extends Candidate {
  kind: 'effect_missing' | 'stale_claim';
  effect: 'present' | 'missing' | 'unknown';
  correlationId: string;
  attempts: number;
  createdMs: number;
  completedMs: number | null;
  leaseMs: number | null;
  expiresMs: number;
}

const text = (value: unknown): string | null => (Buffer.isBuffer(value) ? value.toString('utf8') : typeof value === 'string' || typeof value === 'number' ? String(value) : null);
const num = (value: unknown): number | null => {
  const t = text(value);
  return t === null ? null : Number(t);
};
const memberOf = (scope: string, key: string) => `${scope.length}:${scope}:${key}`;

function parseMember(member: string): { scope: string; key: string } | null {
  const colon = member.indexOf(':');
  const length = Number(member.slice(0, colon));
  if (colon < 1 || !Number.isInteger(length) || member[colon + 1 + length] !== ':') return null;
  return { scope: member.slice(colon + 1, colon + 1 + length), key: member.slice(colon + 2 + length) };
}

/**
 * Runs reconciliation for one service (see the module's comment). `pool`: the store's Postgres
 * (findings and runs are written there); `redis`: the service's Redis connection.
 */
export class RedisReconciler {
  private readonly options: ResolvedReconcileOptions;
  /** The SCAN cursor of each server ('' for one server), resumed run after run. */
  private readonly cursors = new Map<string, string>();
  /** Indexes a SCAN returned that no run has sampled yet, per server: the next run starts with them. */
  private readonly pending = new Map<string, string[]>();
  /** Which server a run samples first (a cluster: each master in turn, so none waits behind a large one). */
  private runs = 0;

  constructor(
    private readonly pool: pg.Pool,
    private readonly redis: RedisCommands,
    private readonly service: string,
    options: ReconcileOptions,
    private readonly onError: (error: unknown, task: string) => void,
  ) {
    this.options = parseReconcileOptions(options);
  }

  get intervalMs(): number {
    return this.options.intervalMs;
  }

  /** One run: re-checks, samples, writes its findings and its run row, in one transaction under the service's lock. */
  async runOnce(): Promise<ReconcileRun> {
    const started = performance.now();
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await client.query('BEGIN');
      try {
        const { rows: lock } = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_xact_lock($1, hashtext($2)) AS locked', [RECONCILE_LOCK_CLASS, this.service]);
        if (!lock[0]?.locked) {
          await client.query('ROLLBACK');
          return { status: 'skipped', examined: 0, effectChecks: 0, effectErrors: 0, effectMissing: 0, staleClaims: 0, cleared: 0, unlisted: 0, passCompleted: false };
        }
        const run = await this.reconcile(client, started);
        await client.query('COMMIT');
        return run;
      } catch (error) {
        await client.query('ROLLBACK').catch((rollback: unknown) => (broken = rollback as Error));
        throw error;
      }
    } finally {
      client.release(broken);
    }
  }

  private async reconcile(client: pg.PoolClient, started: number): Promise<ReconcileRun> {
    const { budget } = this.options;
    const run = { examined: 0, effectChecks: 0, effectErrors: 0, cleared: 0, unlisted: 0, passCompleted: false };
    const now = await this.now();
    // 1. The findings kept, least recently checked first: up to half the budget.
    const { rows: kept } = await client.query<{ principal_id: string; scope: string; key: string }>(
      RECHECK_TEXT,
      [this.service, Math.ceil(budget / 2)],
    );
    const candidates: Candidate[] = kept.map((row) => ({ principalId: row.principal_id, scope: row.scope, key: row.key }));
    const seen = new Set(candidates.map((c) => `${c.principalId} ${c.scope} ${c.key}`));
    // 2. Samples of the principals' indexes, with what is left.
    for (const sample of await this.sample(budget - candidates.length, run)) {
      const id = `${sample.principalId} ${sample.scope} ${sample.key}`;
      if (!seen.has(id)) {
        seen.add(id);
        candidates.push(sample);
      }
    }
    const findings: Finding[] = [];
    const resolved: Candidate[] = [];
    for (const candidate of candidates.slice(0, budget)) {
      run.examined += 1;
      const verdict = await this.judge(candidate, now, run);
      if (verdict === 'resolved') resolved.push(candidate);
      else if (verdict !== 'unknown') findings.push(verdict);
    }
    run.cleared = await this.clear(client, resolved);
    run.unlisted = await this.keep(client, findings);
    const { rows: counts } = await client.query<{ kind: string; n: number }>(
      'SELECT kind, count(*)::int AS n FROM retrysafe.reconcile_findings WHERE service = $1 GROUP BY kind',
      [this.service],
    );
    await client.query(
      `INSERT INTO retrysafe.reconcile_runs AS r (service, at, duration_ms, examined, effect_checks, effect_errors, unlisted, effect_errors_total)
       VALUES ($1, now(), $2, $3, $4, $5, $6, $5)
       ON CONFLICT (service) DO UPDATE SET at = excluded.at, duration_ms = excluded.duration_ms, examined = excluded.examined,
         effect_checks = excluded.effect_checks, effect_errors = excluded.effect_errors, unlisted = excluded.unlisted,
         effect_errors_total = r.effect_errors_total + excluded.effect_errors`,
      [this.service, Math.round(performance.now() - started), run.examined, run.effectChecks, run.effectErrors, run.unlisted],
    );
    const count = (kind: string) => counts.find((row) => row.kind === kind)?.n ?? 0;
    return { status: 'completed', ...run, effectMissing: count('effect_missing'), staleClaims: count('stale_claim') };
  }

  private async now(): Promise<number> {
    const [seconds, micros] = (await this.redis.sendCommand(['TIME'])) as unknown[];
    return Number(text(seconds)) * 1000 + Math.floor(Number(text(micros)) / 1000);
  }

  /** Up to `wanted` records from the service's indexes: SCAN from the kept cursor (per server), ZRANDMEMBER of each index found. */
  private async sample(wanted: number, run: { passCompleted: boolean }): Promise<Candidate[]> {
    if (wanted <= 0) return [];
    const all = this.redis.eachMaster ? (await this.redis.eachMaster()).map((m) => ({ name: m.node, commands: m.commands })) : [{ name: '', commands: this.redis }];
    const first = this.runs++ % all.length;
    const servers = [...all.slice(first), ...all.slice(0, first)];
    const prefix = 'retrysafe:{';
    const suffix = `:${this.service}}:keys`;
    const samples: Candidate[] = [];
    let wrappedEverywhere = true;
    for (const server of servers) {
      const queue = this.pending.get(server.name) ?? [];
      this.pending.set(server.name, queue);
      // This server's SCAN went round its keyspace in this run: it starts again next run.
      let wrapped = false;
      for (let calls = 0; samples.length < wanted; ) {
        const indexKey = queue.shift();
        if (indexKey === undefined) {
          if (calls >= SCAN_CALLS_PER_RUN || wrapped) break;
          calls += 1;
          const cursor = this.cursors.get(server.name) ?? '0';
          const reply = (await server.commands.sendCommand(['SCAN', cursor, 'MATCH', `${prefix}*${suffix}`, 'COUNT', String(SCAN_COUNT), 'TYPE', 'zset'])) as [unknown, unknown[]];
          const next = text(reply[0]) ?? '0';
          this.cursors.set(server.name, next);
          for (const found of reply[1].map(text)) if (found !== null) queue.push(found);
          // Round the whole keyspace: what it found is sampled, then the next run starts a new pass.
          if (next === '0') wrapped = true;
          continue;
        }
        if (!indexKey.startsWith(prefix) || !indexKey.endsWith(suffix)) continue;
        const principalId = indexKey.slice(prefix.length, -suffix.length);
        if (!UUID.test(principalId)) continue;
        // Keys of one slot: sent through the routing connection.
        const members = (await this.redis.sendCommand(['ZRANDMEMBER', indexKey, String(Math.min(PER_INDEX, wanted - samples.length))])) as unknown[];
        for (const member of members.map(text)) {
          const parsed = member === null ? null : parseMember(member);
          if (parsed) samples.push({ principalId, ...parsed });
        }
      }
      wrappedEverywhere &&= wrapped;
    }
    run.passCompleted = wrappedEverywhere;
    return samples;
  }

  /** Reads one record's metadata and decides: a finding, resolved (no finding), or unknown (effectExists failed: left as it is). */
  private async judge(candidate: Candidate, now: number, run: { effectChecks: number; effectErrors: number }): Promise<Finding | 'resolved' | 'unknown'> {
    const recordKey = `retrysafe:{${candidate.principalId}:${this.service}}:${memberOf(candidate.scope, candidate.key)}`;
    const [state, cid, ref, att, created, completed, expires, lease] = (await this.redis.sendCommand(['HMGET', recordKey, ...FIELDS])) as unknown[];
    const stateText = text(state);
    const createdMs = num(created);
    const expiresMs = num(expires);
    if (stateText === null || createdMs === null || expiresMs === null || expiresMs <= now) return 'resolved'; // gone
    const leaseMs = num(lease);
    const completedMs = num(completed);
    const stale = stateText === 'in_progress' && leaseMs !== null && leaseMs <= now;
    if (stateText === 'completed' && completedMs !== null && completedMs > now - this.options.settleMs) return 'unknown';
    if (stateText !== 'completed' && !stale) return 'resolved'; // running within its lease, or failed (retryable)
    const query: EffectQuery = {
      principalId: candidate.principalId,
      service: this.service,
      scope: candidate.scope,
      key: candidate.key,
      correlationId: text(cid) ?? '',
      reference: text(ref),
      state: stale ? 'in_progress' : 'completed',
    };
    const effect = await this.effectExists(query, run);
    const finding: Finding = {
      ...candidate,
      kind: stale ? 'stale_claim' : 'effect_missing',
      effect: effect === null ? 'unknown' : effect ? 'present' : 'missing',
      correlationId: query.correlationId,
      attempts: num(att) ?? 1,
      createdMs,
      completedMs,
      leaseMs: stale ? leaseMs : null,
      expiresMs,
    };
    if (stale) return finding;
    if (effect === null) return 'unknown';
    return effect ? 'resolved' : finding;
  }

  /** The adopter's answer, or null when it threw or took longer than effectTimeoutMs (counted, told to onError). */
  private async effectExists(query: EffectQuery, run: { effectChecks: number; effectErrors: number }): Promise<boolean | null> {
    run.effectChecks += 1;
    let timer: NodeJS.Timeout | undefined;
    try {
      const answer = await Promise.race([
        Promise.resolve().then(() => this.options.effectExists(query)),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`effectExists gave no answer in ${this.options.effectTimeoutMs} ms`)), this.options.effectTimeoutMs);
        }),
      ]);
      if (typeof answer !== 'boolean') throw new TypeError('effectExists must answer true or false');
      return answer;
    } catch (error) {
      run.effectErrors += 1;
      this.onError(error, 'redis reconcile: effectExists');
      return null;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Deletes the findings of resolved keys (through the primary key). */
  private async clear(client: pg.PoolClient, resolved: Candidate[]): Promise<number> {
    if (resolved.length === 0) return 0;
    const result = await client.query(
      `DELETE FROM retrysafe.reconcile_findings f USING unnest($2::uuid[], $3::text[], $4::text[]) AS r(principal_id, scope, key)
       WHERE f.principal_id = r.principal_id AND f.service = $1 AND f.scope = r.scope AND f.key = r.key`,
      [this.service, resolved.map((c) => c.principalId), resolved.map((c) => c.scope), resolved.map((c) => c.key)],
    );
    return result.rowCount ?? 0;
  }

  /** Upserts the findings: those kept already are updated; new ones only while the service's list is under maxFindings. Returns those left out. */
  private async keep(client: pg.PoolClient, findings: Finding[]): Promise<number> {
    if (findings.length === 0) return 0;
    const ids = (list: Finding[]) => [this.service, list.map((f) => f.principalId), list.map((f) => f.scope), list.map((f) => f.key)];
    // Kept already: updated whatever the bound.
    const { rows: existing } = await client.query<{ principal_id: string; scope: string; key: string }>(
      `SELECT f.principal_id, f.scope, f.key FROM retrysafe.reconcile_findings f JOIN unnest($2::uuid[], $3::text[], $4::text[]) AS r(principal_id, scope, key)
         ON f.principal_id = r.principal_id AND f.service = $1 AND f.scope = r.scope AND f.key = r.key`,
      ids(findings),
    );
    const known = new Set(existing.map((row) => `${row.principal_id} ${row.scope} ${row.key}`));
    const { rows: total } = await client.query<{ n: number }>('SELECT count(*)::int AS n FROM retrysafe.reconcile_findings WHERE service = $1', [this.service]);
    let room = Math.max(0, this.options.maxFindings - (total[0]?.n ?? 0));
    const admitted = findings.filter((f) => {
      if (known.has(`${f.principalId} ${f.scope} ${f.key}`)) return true;
      if (room === 0) return false;
      room -= 1;
      return true;
    });
    const at = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
    await client.query(
      `INSERT INTO retrysafe.reconcile_findings AS f (principal_id, service, scope, key, kind, effect, correlation_id, attempts, created_at, completed_at, lease_expired_at, expires_at, found_at, checked_at)
       SELECT r.principal_id, $1, r.scope, r.key, r.kind, r.effect, r.correlation_id, r.attempts, r.created_at, r.completed_at, r.lease_expired_at, r.expires_at, now(), now()
       FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int[], $9::timestamptz[], $10::timestamptz[], $11::timestamptz[], $12::timestamptz[])
         AS r(principal_id, scope, key, kind, effect, correlation_id, attempts, created_at, completed_at, lease_expired_at, expires_at)
       ON CONFLICT (principal_id, service, scope, key) DO UPDATE SET kind = excluded.kind, effect = excluded.effect, correlation_id = excluded.correlation_id,
         attempts = excluded.attempts, completed_at = excluded.completed_at, lease_expired_at = excluded.lease_expired_at, expires_at = excluded.expires_at,
         checked_at = excluded.checked_at,
         found_at = CASE WHEN f.kind = excluded.kind THEN f.found_at ELSE excluded.found_at END`,
      [
        ...ids(admitted),
        admitted.map((f) => f.kind),
        admitted.map((f) => f.effect),
        admitted.map((f) => f.correlationId),
        admitted.map((f) => f.attempts),
        admitted.map((f) => at(f.createdMs)),
        admitted.map((f) => at(f.completedMs)),
        admitted.map((f) => at(f.leaseMs)),
        admitted.map((f) => at(f.expiresMs)),
      ],
    );
    return findings.length - admitted.length;
  }
}
