// GET /api/admin/retention/export?what=policies|history|evidence[&service=]: the retention review
// as CSV for sign-off (compliance), of every service or of one; each export is audited in the
// same transaction as its read.
import { z } from 'zod';
import { inTransaction } from '@/db/transaction';
import { parseQuery, csvAttachment, problemFor } from '@/app/_lib/admin-http';
import { authorizeRoute, dashboardPool } from '@/app/_lib/dashboard';
import { toCsv } from '@/server/audit/csv';
import { writeAudit } from '@/server/audit/log';
import { policyServices, readRetentionReview, readSweepEvidence, UnknownServiceError } from '@/server/retention/review';
import { serviceNameSchema } from '@/server/service-name';
import { handled } from '@/app/_lib/route-errors';

export const dynamic = 'force-dynamic';

/** Runs in the evidence export: the review shows the last 50; compliance signs off on more. */
const EVIDENCE_EXPORT_RUNS = 10_000;

const querySchema = z.strictObject({ what: z.enum(['policies', 'history', 'evidence']), service: serviceNameSchema.optional() });

async function get(request: Request): Promise<Response> {
  const operator = await authorizeRoute(request, '/api/admin/retention/export');
  if (operator instanceof Response) return operator;
  const parsed = parseQuery(request, querySchema);
  if (parsed instanceof Response) return parsed;
  const { what, service } = parsed;
  const csv = await inTransaction(dashboardPool(), async (db) => {
    // Each export reads only what it holds (the evidence is read on its own, 10,000 runs deep).
    if (what === 'evidence' && service !== undefined && !(await policyServices(db)).includes(service)) throw new UnknownServiceError(service);
    const review = what === 'evidence' ? null : await readRetentionReview(db, service);
    const table =
      review && what === 'policies'
        ? toCsv(
            ['service', 'endpoint', 'scope_mode', 'retry_window_seconds', 'retention_seconds', 'margin_seconds', 'keeps_promise', 'evidence_min_margin_seconds', 'evidence_rows_deleted', 'version', 'updated_at', 'updated_by'],
            review.policies.map((p) => [p.service, p.endpoint, p.scopeMode, p.retryWindowSeconds, p.retentionSeconds, p.marginSeconds, p.keepsPromise, p.evidenceMinMarginSeconds, p.evidenceRowsDeleted, p.version, p.updatedAt, p.updatedBy]),
          )
        : review && what === 'history'
          ? toCsv(
              ['id', 'service', 'endpoint', 'version', 'changed_at', 'changed_by', 'reason', 'breaking', 'acknowledged', 'previous', 'current'],
              review.history.map((h) => [h.id, h.service, h.endpoint, h.version, h.changedAt, h.changedBy, h.reason, h.breaking, h.acknowledged, h.previous, h.current]),
            )
          : toCsv(
              ['run_id', 'started_at', 'finished_at', 'trigger', 'status', 'service', 'scope', 'rows_deleted', 'min_age_at_deletion_seconds', 'retry_window_seconds', 'min_margin_seconds'],
              (await readSweepEvidence(db, EVIDENCE_EXPORT_RUNS, service)).flatMap((run) =>
                run.scopes.map((scope) => [run.runId, run.startedAt, run.finishedAt, run.trigger, run.status, scope.service, scope.scope, scope.rowsDeleted, scope.minAgeSeconds, scope.retryWindowSeconds, scope.minMarginSeconds]),
              ),
            );
    await writeAudit(db, { actor: operator.email, action: 'retention.export', target: service === undefined ? { what } : { what, service } });
    return table;
  }).catch((error: unknown) => problemFor(error, { UNKNOWN_SERVICE: 404 }));
  if (csv instanceof Response) return csv;
  return csvAttachment(csv, service === undefined ? `retrysafe-retention-${what}` : `retrysafe-retention-${what}-${service}`);
}

export const GET = handled('/api/admin/retention/export', get);
