// The retention review as CSV for sign-off (compliance): policies, history or sweep evidence, of
// every service or of one. Read where the dashboard reads, audited on the primary before it is
// returned (auditedExport).
import { toCsv } from '../audit/csv';
import { auditedExport, type ExportPools } from '../audit/export';
import { writeAudit } from '../audit/log';
import type { Queryable } from '@retrysafe/store/postgres';
import type { StoreSampleRow } from '../metrics/overview';
import { changeWords, policyChanges, policyWords } from './policy-words';
import { policyServices, readPolicyReview, readSweepEvidence, UnknownServiceError } from './review';

export type RetentionExport = 'policies' | 'history' | 'evidence' | 'store';

/** The store export's ranges (as the overview's) and the step of its rows: one sample per step. */
export const storeExportRanges = { '24h': { seconds: 86_400, step: 900 }, '7d': { seconds: 604_800, step: 3_600 }, '30d': { seconds: 2_592_000, step: 21_600 } } as const;
export type StoreExportRange = keyof typeof storeExportRanges;

/**
 * The store against its baseline (every service: the table is shared), the last store_stats
 * sample of each step of the range, oldest first. The baseline is the rows a store that expires
 * on time holds: per scope, the new keys created within its trailing retention, summed (claim
 * rate x retention; in the partitioned layout, where a row stays until its partition ends, from
 * the start of the current partition less the retention); a ratio well above 1 means expiry is
 * not keeping up. Samples taken before that allowance was made read 1x to 2x of rate x retention
 * through each day in that layout, and their cleanup lag up to a day.
 */
export const STORE_EXPORT_COLUMNS = [
  'sampled_at',
  'estimated_rows',
  'baseline_rows (new keys within each scope\'s trailing retention: claim rate x retention; partitioned layout and a retention of a day or more: from the start of the current partition less the retention)',
  'rows_to_baseline',
  'table_bytes',
  'index_bytes',
  'toast_bytes',
  'total_bytes',
  'oldest_row_age_seconds',
  'cleanup_lag_seconds (the oldest row past its expiry; partitioned layout: the oldest partition past its end or the walk of keys promised less than a day if longer)',
  'stale_claims',
] as const;

async function storeRows(db: Queryable, range: StoreExportRange): Promise<unknown[][]> {
  const { seconds, step } = storeExportRanges[range];
  // The last sample of each step: one backward primary-key probe per step (as the overview's chart).
  const { rows } = await db.query<StoreSampleRow & { sampled_at: Date }>({
    text: `SELECT s.sampled_at, s.estimated_rows, s.baseline_rows, s.table_bytes, s.index_bytes, s.toast_bytes, s.oldest_row_age_seconds, s.cleanup_lag_seconds, s.stale_claims
           FROM generate_series(date_bin($1::int * interval '1 second', now() - $2::int * interval '1 second', 'epoch'), now(), $1::int * interval '1 second') AS g(t)
           CROSS JOIN LATERAL (
             SELECT * FROM store_stats WHERE sampled_at >= g.t AND sampled_at < g.t + $1::int * interval '1 second' ORDER BY sampled_at DESC LIMIT 1
           ) s ORDER BY s.sampled_at`,
    values: [step, seconds],
  });
  return rows.map((row) => {
    const estimated = Number(row.estimated_rows);
    const baseline = Number(row.baseline_rows);
    const bytes = [Number(row.table_bytes), Number(row.index_bytes), Number(row.toast_bytes)] as const;
    return [row.sampled_at, estimated, baseline, baseline > 0 ? Number((estimated / baseline).toFixed(3)) : null, ...bytes, bytes[0] + bytes[1] + bytes[2], row.oldest_row_age_seconds, row.cleanup_lag_seconds, row.stale_claims];
  });
}

/** Runs in the evidence export: the review shows the last 50; compliance signs off on more. */
export const EVIDENCE_EXPORT_RUNS = 10_000;

/** The export's CSV; throws UnknownServiceError for a service with no policies. `range`: the store export's (default 30 d). */
export function exportRetention(pools: ExportPools, actor: string, what: RetentionExport, service?: string, range: StoreExportRange = '30d'): Promise<string> {
  return auditedExport(
    pools,
    async (db) => {
      if (what === 'store') return toCsv([...STORE_EXPORT_COLUMNS], await storeRows(db, range));
      // Each export reads only what it holds (the evidence is read on its own, 10,000 runs deep).
      if (what === 'evidence') {
        if (service !== undefined && !(await policyServices(db)).includes(service)) throw new UnknownServiceError(service);
        return toCsv(
          ['run_id', 'started_at', 'finished_at', 'trigger', 'status', 'service', 'scope', 'rows_deleted', 'min_age_at_deletion_seconds', 'retry_window_seconds', 'min_margin_seconds', 'max_past_expiry_at_deletion_seconds'],
          (await readSweepEvidence(db, EVIDENCE_EXPORT_RUNS, service)).flatMap((run) =>
            run.scopes.map((scope) => [run.runId, run.startedAt, run.finishedAt, run.trigger, run.status, scope.service, scope.scope, scope.rowsDeleted, scope.minAgeSeconds, scope.retryWindowSeconds, scope.minMarginSeconds, scope.maxPastExpirySeconds]),
          ),
        );
      }
      const review = await readPolicyReview(db, service);
      if (what === 'policies') {
        return toCsv(
          ['service', 'endpoint', 'scope_mode', 'retry_window_seconds', 'retention_seconds', 'margin_seconds', 'keeps_promise', 'evidence_min_margin_seconds', 'evidence_rows_deleted', 'version', 'updated_at', 'updated_by', 'code_declared_at', 'code_differences'],
          review.policies.map((p) => [
            ...[p.service, p.endpoint, p.scopeMode, p.retryWindowSeconds, p.retentionSeconds, p.marginSeconds, p.keepsPromise, p.evidenceMinMarginSeconds, p.evidenceRowsDeleted, p.version, p.updatedAt, p.updatedBy],
            p.code?.declaredAt ?? null,
            p.codeDifferences.map((difference) => `${difference.label}: ${difference.code} in code, ${difference.published} published`).join('; '),
          ]),
        );
      }
      // In the review page's words and units (Retention 26 h, not retentionSeconds 93600), with the fields that changed named.
      return toCsv(
        ['id', 'service', 'endpoint', 'version', 'changed_at', 'changed_by', 'reason', 'breaking', 'acknowledged', 'changed_fields', 'change', 'previous', 'current'],
        review.history.map((h) => [
          ...[h.id, h.service, h.endpoint, h.version, h.changedAt, h.changedBy, h.reason, h.breaking, h.acknowledged],
          h.previous ? policyChanges(h.previous, h.current).map((change) => change.label).join('; ') : 'all (created)',
          changeWords(h.previous, h.current),
          h.previous ? policyWords(h.previous) : null,
          policyWords(h.current),
        ]),
      );
    },
    (db) => writeAudit(db, { actor, action: 'retention.export', target: what === 'store' ? { what, range } : service === undefined ? { what } : { what, service } }),
  );
}
