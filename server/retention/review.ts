// What compliance signs off: each policy against its published promise (retention at least
// the documented window, and by how much), the change history with breaking changes flagged,
// and the sweeper's evidence that no key was deleted inside its window (the youngest deleted
// row's age at deletion against the window in force), and where a route's own policy in code
// differs from the published one. Read through the dashboard's role.
import { readCapacity, type Capacity } from '../metrics/capacity';
import type { Queryable } from '@retrysafe/store/postgres';
import { fieldsOf, fieldsOfRow, listPolicies, policyHistory, type PolicyFields, type PolicyFieldsRow, type PolicyHistoryEntry, type PolicyRecord } from './policies';
import { policyChanges } from './policy-words';

/** A route's own policy as its service's code declares it (in force on that route's requests). */
export interface CodePolicy extends PolicyFields {
  /** When a route last registered these values (each instance's start registers its routes). */
  declaredAt: string;
}

/** One field where the code and the published policy differ, both in the operator's words. */
export interface CodeDifference {
  field: keyof PolicyFields;
  label: string;
  published: string;
  code: string;
}

export interface PolicyReview extends Omit<PolicyRecord, 'updatedAt'> {
  updatedAt: string;
  marginSeconds: number;
  /** Retention covers the documented window: expiry cannot reopen the duplicate window. */
  keepsPromise: boolean;
  /** Over the sweep runs reviewed: the smallest margin between a deleted row's age and the window (null: nothing deleted). */
  evidenceMinMarginSeconds: number | null;
  evidenceRowsDeleted: number;
  /**
   * The route's own policy in code, when a route declares one: its requests run on these values,
   * whatever the published row says. null: the endpoint runs on the published policy.
   */
  code: CodePolicy | null;
  /** Where the code's values differ from the published policy (empty: they agree, or no code declares one). */
  codeDifferences: CodeDifference[];
}

export interface SweepEvidence {
  runId: number;
  startedAt: string;
  finishedAt: string | null;
  trigger: string;
  status: string;
  rowsDeleted: number;
  staleReleased: number;
  longestChunkMs: number;
  stopReason: string | null;
  scopes: { service: string; scope: string; rowsDeleted: number; minAgeSeconds: number; retryWindowSeconds: number | null; minMarginSeconds: number | null; maxPastExpirySeconds: number | null }[];
}

export interface RetentionReview {
  /** The service reviewed (null: every service). */
  service: string | null;
  /** Every service with a policy, whichever is reviewed (the Service picker's choices). */
  services: string[];
  policies: PolicyReview[];
  history: (Omit<PolicyHistoryEntry, 'changedAt'> & { changedAt: string })[];
  /** The most recent runs that deleted or released something, or failed, newest first. */
  sweeps: SweepEvidence[];
  /**
   * The key table against the database's memory, and the steady state the chosen service's
   * new-key rate and its policies' retention lead to (the overview's capacity figures,
   * server/metrics/capacity.ts): catalog and metrics reads only, never a key or a body.
   */
  capacity: Capacity & { thresholdShare: number };
}

/** What the capacity figures need from the server's settings. */
export interface CapacitySettings {
  /** DATABASE_MEMORY_BYTES, where the operator knows the instance's memory. */
  databaseMemoryBytes?: number | undefined;
  /** The share of memory over which the index_over_memory check fires. */
  indexOverMemoryShare: number;
}

/**
 * Recent runs that did something (a sweep every minute that finds nothing is not evidence):
 * a backward scan of sweep_runs' primary key, then their scopes by sweep_run_scopes_pkey.
 * For one service: the runs that deleted some of its keys, with its scopes only, and
 * `rowsDeleted` its share of the run (`staleReleased` stays the run's, which is not kept per
 * service); each run is tested by a probe of sweep_run_scopes_pkey (run_id, service) as the
 * backward scan passes it.
 */
export async function readSweepEvidence(db: Queryable, limit = 50, service?: string): Promise<SweepEvidence[]> {
  const runs = await db.query<{
    id: string;
    started_at: Date;
    finished_at: Date | null;
    trigger: string;
    status: string;
    rows_deleted: string;
    stale_released: number;
    longest_chunk_ms: number;
    stop_reason: string | null;
  }>(
    `SELECT id, started_at, finished_at, trigger, status, rows_deleted, stale_released, longest_chunk_ms, stop_reason FROM sweep_runs
     WHERE (rows_deleted > 0 OR stale_released > 0 OR status = 'failed')
       AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM sweep_run_scopes s WHERE s.run_id = sweep_runs.id AND s.service = $2))
     ORDER BY id DESC LIMIT $1`,
    [limit, service ?? null],
  );
  const ids = runs.rows.map((run) => run.id);
  const scopes = await db.query<{ run_id: string; service: string; scope: string; rows_deleted: string; min_age_seconds: number; retry_window_seconds: number | null; min_margin_seconds: number | null; max_past_expiry_seconds: number | null }>(
    `SELECT run_id, service, scope, rows_deleted, min_age_seconds, retry_window_seconds, min_margin_seconds, max_past_expiry_seconds FROM sweep_run_scopes
     WHERE run_id = ANY($1::bigint[]) AND ($2::text IS NULL OR service = $2) ORDER BY run_id, service, scope`,
    [ids, service ?? null],
  );
  const scopesByRun = new Map<string, (typeof scopes.rows)[number][]>();
  for (const scope of scopes.rows) {
    const ofRun = scopesByRun.get(scope.run_id);
    if (ofRun) ofRun.push(scope);
    else scopesByRun.set(scope.run_id, [scope]);
  }
  return runs.rows.map((run) => {
    const ofRun = scopesByRun.get(run.id) ?? [];
    return {
      runId: Number(run.id),
      startedAt: run.started_at.toISOString(),
      finishedAt: run.finished_at?.toISOString() ?? null,
      trigger: run.trigger,
      status: run.status,
      rowsDeleted: service === undefined ? Number(run.rows_deleted) : ofRun.reduce((sum, scope) => sum + Number(scope.rows_deleted), 0),
      staleReleased: run.stale_released,
      longestChunkMs: run.longest_chunk_ms,
      stopReason: run.stop_reason,
      scopes: ofRun.map((scope) => ({
        service: scope.service,
        scope: scope.scope,
        rowsDeleted: Number(scope.rows_deleted),
        minAgeSeconds: scope.min_age_seconds,
        retryWindowSeconds: scope.retry_window_seconds,
        minMarginSeconds: scope.min_margin_seconds,
        maxPastExpirySeconds: scope.max_past_expiry_seconds,
      })),
    };
  });
}

/** Every service with a policy, by endpoint_policies' primary key (service, endpoint). */
export async function policyServices(db: Queryable): Promise<string[]> {
  const { rows } = await db.query<{ service: string }>('SELECT DISTINCT service FROM endpoint_policies ORDER BY service');
  return rows.map((row) => row.service);
}

/**
 * The routes' own policies as their code declares them (of one service when given), by
 * endpoint_policy_declarations' primary key, keyed "service endpoint".
 */
export async function readCodePolicies(db: Queryable, service?: string): Promise<Map<string, CodePolicy>> {
  const { rows } = await db.query<PolicyFieldsRow & { service: string; endpoint: string; declared_at: Date }>(
    `SELECT service, endpoint, scope_mode, retry_window_seconds, retention_seconds, lease_ms, lock_timeout_ms, max_response_bytes, live_key_quota, declared_at
     FROM endpoint_policy_declarations WHERE ($1::text IS NULL OR service = $1) ORDER BY service, endpoint`,
    [service ?? null],
  );
  return new Map(rows.map((row) => [`${row.service} ${row.endpoint}`, { ...fieldsOfRow(row), declaredAt: row.declared_at.toISOString() }]));
}

/** Where the code's policy differs from the published one, field by field, in words. */
export function codeDifferences(published: PolicyFields, code: PolicyFields | null): CodeDifference[] {
  if (!code) return [];
  return policyChanges({ ...fieldsOf(published) }, { ...fieldsOf(code) }).map((change) => ({ field: change.field, label: change.label, published: change.from, code: change.to }));
}

/** A review asked for a service no policy names (a 404: there is nothing of it to review). */
export class UnknownServiceError extends Error {
  readonly code = 'UNKNOWN_SERVICE';
  constructor(readonly service: string) {
    super(`No policy names the service "${service.slice(0, 80)}"`);
  }
}

/** The review of every service, or of one (`service`): its policies, their history and its evidence. */
/** The review with its capacity figures: the Retention page and GET /api/admin/retention. */
export async function readRetentionReview(db: Queryable, service: string | undefined, settings: CapacitySettings): Promise<RetentionReview> {
  const review = await readPolicyReview(db, service);
  const capacity = await readCapacity(db, { service, databaseMemoryBytes: settings.databaseMemoryBytes });
  return { ...review, capacity: { ...capacity, thresholdShare: settings.indexOverMemoryShare } };
}

/** Policies against their promise, their history and the sweeper's evidence (what the exports hold). */
export async function readPolicyReview(db: Queryable, service?: string): Promise<Omit<RetentionReview, 'capacity'>> {
  const services = await policyServices(db);
  if (service !== undefined && !services.includes(service)) throw new UnknownServiceError(service);
  const [policies, history, sweeps, code] = [
    await listPolicies(db, service),
    await policyHistory(db, service === undefined ? undefined : { service }),
    await readSweepEvidence(db, undefined, service),
    await readCodePolicies(db, service),
  ];
  return {
    service: service ?? null,
    services,
    policies: policies.map((policy) => {
      const evidence = sweeps
        .flatMap((sweep) => sweep.scopes)
        .filter((scope) => scope.service === policy.service && (scope.scope === policy.endpoint || (policy.scopeMode === 'intent' && scope.scope === 'intent')));
      const margins = evidence.map((scope) => scope.minMarginSeconds).filter((margin): margin is number => margin !== null);
      const inCode = code.get(`${policy.service} ${policy.endpoint}`) ?? null;
      // The retention applied is the code's when a route declares its own: shorter than the published window breaks the promise.
      const applied = inCode?.retentionSeconds ?? policy.retentionSeconds;
      return {
        ...policy,
        updatedAt: policy.updatedAt.toISOString(),
        marginSeconds: policy.retentionSeconds - policy.retryWindowSeconds,
        keepsPromise: policy.retentionSeconds >= policy.retryWindowSeconds && applied >= policy.retryWindowSeconds && margins.every((margin) => margin >= 0),
        code: inCode,
        codeDifferences: codeDifferences(policy, inCode),
        evidenceMinMarginSeconds: margins.length > 0 ? Math.min(...margins) : null,
        evidenceRowsDeleted: evidence.reduce((sum, scope) => sum + scope.rowsDeleted, 0),
      };
    }),
    history: history.map((entry) => ({ ...entry, changedAt: entry.changedAt.toISOString() })),
    sweeps,
  };
}

export interface FinishedSweep {
  id: number;
  finishedAt: Date;
  status: string;
  rowsDeleted: number;
  staleReleased: number;
  stopReason: string | null;
}

/**
 * The last sweep run that finished (completed or failed), the one meaning "the last sweep" has
 * everywhere: the overview, the Prometheus gauges (which then stay present while a run is under
 * way) and the store sample's link. A backward scan of sweep_runs' primary key past the running one.
 */
export async function readLastFinishedSweep(db: Queryable): Promise<FinishedSweep | null> {
  const { rows } = await db.query<{ id: string; finished_at: Date; status: string; rows_deleted: string; stale_released: number; stop_reason: string | null }>({
    name: 'retention_last_finished_sweep',
    text: 'SELECT id, finished_at, status, rows_deleted, stale_released, stop_reason FROM sweep_runs WHERE finished_at IS NOT NULL ORDER BY id DESC LIMIT 1',
  });
  const row = rows[0];
  return row
    ? { id: Number(row.id), finishedAt: row.finished_at, status: row.status, rowsDeleted: Number(row.rows_deleted), staleReleased: row.stale_released, stopReason: row.stop_reason }
    : null;
}
