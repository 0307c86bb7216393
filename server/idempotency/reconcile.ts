// What the Redis-kept services' reconcilers found (issue 27.5, migration 0027): per service and
// scope, the completed keys whose effect is missing and the claims past their lease, with each
// service's last run; and, for an operator's drill-down, the findings themselves: principal,
// service, scope, key, correlation id, state, times and whether the effect was found, never a
// body or a fingerprint (the table has neither). Each service's reconciler (@retrysafe/store,
// redis.reconcile) writes them from the service's process, where effectExists runs; the server
// only reads. Audited with its reason, as every read of keys is.
import { z } from 'zod';
import type { Queryable } from '@retrysafe/store/postgres';
import { storableText } from '../storable';
import { serviceNameSchema } from '../service-name';
import { writeAudit } from '../audit/log';
import type { KeyAccess } from './key-metadata';

/** At most this many findings are listed at once. */
export const FINDINGS_LIST_MAX = 500;

export const findingKinds = ['effect_missing', 'stale_claim'] as const;
export type FindingKind = (typeof findingKinds)[number];

export const reconcileListSchema = z.strictObject({
  reason: storableText().trim().min(3, 'say why you list these keys').max(500),
  service: serviceNameSchema.optional(),
  scope: storableText().min(1).max(300).optional(),
  kind: z.enum(findingKinds).optional(),
  limit: z.number().int().min(1).max(FINDINGS_LIST_MAX).default(100),
});
export type ReconcileList = z.input<typeof reconcileListSchema>;

export interface ScopeFindings {
  scope: string;
  /** Completed keys whose effect effectExists did not find. */
  effectMissing: number;
  /** Claims in progress past their lease; of them, those whose effect exists (done, completion lost). */
  staleClaims: number;
  staleWithEffect: number;
}

export interface ServiceReconcile {
  service: string;
  /** The reconciler's last run (null: findings without a run row, e.g. after a restore). */
  lastRunAt: string | null;
  examined: number;
  effectChecks: number;
  effectErrors: number;
  /** Findings the last run could not keep (the service's list at its bound): the counts are then lower bounds. */
  unlisted: number;
  scopes: ScopeFindings[];
}

export interface ReconcileFinding {
  principalId: string;
  service: string;
  scope: string;
  key: string;
  kind: FindingKind;
  effect: 'present' | 'missing' | 'unknown';
  correlationId: string;
  attempts: number;
  createdAt: string;
  completedAt: string | null;
  leaseExpiredAt: string | null;
  foundAt: string;
  checkedAt: string;
}

export interface ReconcileAnswer {
  services: ServiceReconcile[];
  /** The newest found first, at most `limit`, of the service, scope and kind asked. */
  findings: ReconcileFinding[];
  more: boolean;
}

/**
 * Counts per (service, scope, kind) and the stale claims whose effect exists: a scan of
 * reconcile_findings, which each service's reconciler keeps at most maxFindings (default 1,000) rows of.
 */
export const findingCountsText = `SELECT service, scope, count(*) FILTER (WHERE kind = 'effect_missing')::int AS effect_missing,
       count(*) FILTER (WHERE kind = 'stale_claim')::int AS stale_claims,
       count(*) FILTER (WHERE kind = 'stale_claim' AND effect = 'present')::int AS stale_with_effect
     FROM reconcile_findings WHERE ($1::text IS NULL OR service = $1) GROUP BY service, scope ORDER BY service, scope`;

const runsText = `SELECT service, at, examined, effect_checks, effect_errors, unlisted FROM reconcile_runs
     WHERE ($1::text IS NULL OR service = $1) ORDER BY service`;

/** The newest findings of a service, scope and kind (each optional): the bounded table, sorted. */
export const findingsText = `SELECT principal_id, service, scope, key, kind, effect, correlation_id, attempts, created_at, completed_at, lease_expired_at, found_at, checked_at
     FROM reconcile_findings WHERE ($1::text IS NULL OR service = $1) AND ($2::text IS NULL OR scope = $2) AND ($3::text IS NULL OR kind = $3)
     ORDER BY found_at DESC, principal_id, key LIMIT $4`;

/** The counts per service and scope, with each service's last run (no principal, no key: for the metrics too). */
export async function readReconcileCounts(db: Queryable, service: string | null): Promise<ServiceReconcile[]> {
  const [counts, runs] = await Promise.all([
    db.query<{ service: string; scope: string; effect_missing: number; stale_claims: number; stale_with_effect: number }>({ text: findingCountsText, values: [service] }),
    db.query<{ service: string; at: Date; examined: number; effect_checks: number; effect_errors: number; unlisted: number }>({ text: runsText, values: [service] }),
  ]);
  const byService = new Map<string, ServiceReconcile>();
  const entry = (name: string) => {
    let found = byService.get(name);
    if (!found) {
      found = { service: name, lastRunAt: null, examined: 0, effectChecks: 0, effectErrors: 0, unlisted: 0, scopes: [] };
      byService.set(name, found);
    }
    return found;
  };
  for (const run of runs.rows) {
    Object.assign(entry(run.service), { lastRunAt: run.at.toISOString(), examined: run.examined, effectChecks: run.effect_checks, effectErrors: run.effect_errors, unlisted: run.unlisted });
  }
  for (const row of counts.rows) {
    entry(row.service).scopes.push({ scope: row.scope, effectMissing: row.effect_missing, staleClaims: row.stale_claims, staleWithEffect: row.stale_with_effect });
  }
  return [...byService.values()].sort((a, b) => (a.service < b.service ? -1 : a.service > b.service ? 1 : 0));
}

export async function readReconcileFindings(db: Queryable, query: { service?: string | undefined; scope?: string | undefined; kind?: FindingKind | undefined; limit: number }): Promise<{ findings: ReconcileFinding[]; more: boolean }> {
  const iso = (value: Date | null) => (value ? value.toISOString() : null);
  const { rows } = await db.query<{
    principal_id: string;
    service: string;
    scope: string;
    key: string;
    kind: FindingKind;
    effect: ReconcileFinding['effect'];
    correlation_id: string;
    attempts: number;
    created_at: Date;
    completed_at: Date | null;
    lease_expired_at: Date | null;
    found_at: Date;
    checked_at: Date;
  }>({ text: findingsText, values: [query.service ?? null, query.scope ?? null, query.kind ?? null, query.limit + 1] });
  return {
    findings: rows.slice(0, query.limit).map((row) => ({
      principalId: row.principal_id,
      service: row.service,
      scope: row.scope,
      key: row.key,
      kind: row.kind,
      effect: row.effect,
      correlationId: row.correlation_id,
      attempts: row.attempts,
      createdAt: row.created_at.toISOString(),
      completedAt: iso(row.completed_at),
      leaseExpiredAt: iso(row.lease_expired_at),
      foundAt: row.found_at.toISOString(),
      checkedAt: row.checked_at.toISOString(),
    })),
    more: rows.length > query.limit,
  };
}

/**
 * An operator's reconciliation view (operator role): the counts per service and scope and the
 * findings asked for, read from the dashboard's read pool, then its audit row (who, why, which
 * service, scope and kind, how many listed and the distinct principals listed, sorted: a search
 * of the audit log for a principal finds this list too), written before anything is returned: no
 * audit row, no answer.
 */
export async function listReconcileFindings(access: KeyAccess, request: ReconcileList, actor: string): Promise<ReconcileAnswer> {
  const query = reconcileListSchema.parse(request);
  const db = access.trace ?? access.audit;
  const [services, list] = await Promise.all([readReconcileCounts(db, query.service ?? null), readReconcileFindings(db, query)]);
  await writeAudit(access.audit, {
    actor,
    action: 'key.reconcile_list',
    target: { ...(query.service ? { service: query.service } : {}), ...(query.scope ? { scope: query.scope } : {}), ...(query.kind ? { kind: query.kind } : {}) },
    reason: query.reason,
    details: { listed: list.findings.length, more: list.more, principalIds: [...new Set(list.findings.map((row) => row.principalId))].sort() },
  });
  return { services, ...list };
}
