// What compliance signs off: each policy against its published promise (retention at least
// the documented window, and by how much), the change history with breaking changes flagged,
// and the sweeper's evidence that no key was deleted inside its window (the youngest deleted
// row's age at deletion against the window in force). Read through the dashboard's role.
import type { Queryable } from '@retrysafe/store/postgres';
import { listPolicies, policyHistory, type PolicyHistoryEntry, type PolicyRecord } from './policies';

export interface PolicyReview extends Omit<PolicyRecord, 'updatedAt'> {
  updatedAt: string;
  marginSeconds: number;
  /** Retention covers the documented window: expiry cannot reopen the duplicate window. */
  keepsPromise: boolean;
  /** Over the sweep runs reviewed: the smallest margin between a deleted row's age and the window (null: nothing deleted). */
  evidenceMinMarginSeconds: number | null;
  evidenceRowsDeleted: number;
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
  scopes: { service: string; scope: string; rowsDeleted: number; minAgeSeconds: number; retryWindowSeconds: number | null; minMarginSeconds: number | null }[];
}

export interface RetentionReview {
  policies: PolicyReview[];
  history: (Omit<PolicyHistoryEntry, 'changedAt'> & { changedAt: string })[];
  /** The most recent runs that deleted or released something, or failed, newest first. */
  sweeps: SweepEvidence[];
}

/**
 * Recent runs that did something (a sweep every minute that finds nothing is not evidence):
 * a backward scan of sweep_runs' primary key, then their scopes by sweep_run_scopes_pkey.
 */
export async function readSweepEvidence(db: Queryable, limit = 50): Promise<SweepEvidence[]> {
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
     WHERE rows_deleted > 0 OR stale_released > 0 OR status = 'failed' ORDER BY id DESC LIMIT $1`,
    [limit],
  );
  const ids = runs.rows.map((run) => run.id);
  const scopes = await db.query<{ run_id: string; service: string; scope: string; rows_deleted: string; min_age_seconds: number; retry_window_seconds: number | null; min_margin_seconds: number | null }>(
    'SELECT run_id, service, scope, rows_deleted, min_age_seconds, retry_window_seconds, min_margin_seconds FROM sweep_run_scopes WHERE run_id = ANY($1::bigint[]) ORDER BY run_id, service, scope',
    [ids],
  );
  const scopesByRun = new Map<string, (typeof scopes.rows)[number][]>();
  for (const scope of scopes.rows) {
    const ofRun = scopesByRun.get(scope.run_id);
    if (ofRun) ofRun.push(scope);
    else scopesByRun.set(scope.run_id, [scope]);
  }
  return runs.rows.map((run) => ({
    runId: Number(run.id),
    startedAt: run.started_at.toISOString(),
    finishedAt: run.finished_at?.toISOString() ?? null,
    trigger: run.trigger,
    status: run.status,
    rowsDeleted: Number(run.rows_deleted),
    staleReleased: run.stale_released,
    longestChunkMs: run.longest_chunk_ms,
    stopReason: run.stop_reason,
    scopes: (scopesByRun.get(run.id) ?? []).map((scope) => ({
      service: scope.service,
      scope: scope.scope,
      rowsDeleted: Number(scope.rows_deleted),
      minAgeSeconds: scope.min_age_seconds,
      retryWindowSeconds: scope.retry_window_seconds,
      minMarginSeconds: scope.min_margin_seconds,
    })),
  }));
}

export async function readRetentionReview(db: Queryable): Promise<RetentionReview> {
  const [policies, history, sweeps] = [await listPolicies(db), await policyHistory(db), await readSweepEvidence(db)];
  return {
    policies: policies.map((policy) => {
      const evidence = sweeps
        .flatMap((sweep) => sweep.scopes)
        .filter((scope) => scope.service === policy.service && (scope.scope === policy.endpoint || (policy.scopeMode === 'intent' && scope.scope === 'intent')));
      const margins = evidence.map((scope) => scope.minMarginSeconds).filter((margin): margin is number => margin !== null);
      return {
        ...policy,
        updatedAt: policy.updatedAt.toISOString(),
        marginSeconds: policy.retentionSeconds - policy.retryWindowSeconds,
        keepsPromise: policy.retentionSeconds >= policy.retryWindowSeconds && margins.every((margin) => margin >= 0),
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
