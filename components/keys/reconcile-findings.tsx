'use client';
// What the Redis-kept services' reconcilers found (the overview's "Completed keys whose effect is
// missing" check links here): per service and scope, the completed keys whose effect is missing
// and the claims past their lease, each service's last run, and a drill-down to the keys
// (principal, scope, key, correlation id, whether the effect was found, times), never a response
// body. Uses the Reason of the lookup form; each listing is audited with it. Each row opens the
// key's own lookup.
import { useMutation } from '@tanstack/react-query';
import type { FindingKind, ReconcileAnswer, ReconcileFinding } from '@/server/idempotency/reconcile';
import { adminFetch } from '../admin-fetch';
import { Problem } from '../banners';
import { formatDateTime } from '../overview/format';
import { KeyIdentityCells } from './key-identity-cells';

interface ListInput {
  reason: string;
  service?: string;
  scope?: string;
  kind?: FindingKind;
}

const kindLabels: Record<FindingKind, string> = { effect_missing: 'effect missing', stale_claim: 'stale claim' };
const effectLabels: Record<ReconcileFinding['effect'], string> = { present: 'present', missing: 'missing', unknown: 'unknown (check failed)' };

export function ReconcileFindings({ reason, service, onOpen }: { reason: string; service: string; onOpen: (finding: ReconcileFinding) => void }) {
  const list = useMutation({
    mutationFn: (input: ListInput) => adminFetch<ReconcileAnswer>('/api/admin/keys/reconcile', { method: 'POST', body: input, fieldLabels: { reason: 'Reason', service: 'Service' } }),
  });
  const ask = (extra: Omit<ListInput, 'reason'> = {}) => list.mutate({ reason, ...(service === '' ? {} : { service }), ...extra });
  const disabled = list.isPending || reason.trim().length < 3;
  return (
    <section id="reconcile" className="card" aria-labelledby="reconcile-heading">
      <h2 id="reconcile-heading">Reconciliation (Redis-kept services)</h2>
      <p className="muted small">
        Each Redis-kept service with a reconciler samples its keys and asks its own database whether each effect exists. Completed keys whose effect is missing were answered as done; stale claims are in
        progress past their lease (a crash between the effect and the completion when the effect is present). Sampled: the counts are a lower bound.
      </p>
      <form
        className="toolbar"
        onSubmit={(event) => {
          event.preventDefault();
          ask();
        }}
      >
        <button type="submit" disabled={disabled}>
          Show reconciliation findings
        </button>
        <span className="muted small">{service === '' ? 'Every service' : `Service ${service}`}; uses the Reason above; audited.</span>
      </form>
      <div role="status" className="results">
        {list.error ? <Problem>{list.error.message}</Problem> : null}
        {list.data ? (
          list.data.services.length === 0 ? (
            <p className="empty">No reconciler has run for {service === '' ? 'any service' : `service ${service}`}.</p>
          ) : (
            <>
              <div className="table-scroll">
                <table className="stack">
                  <caption className="visually-hidden">Findings per service and scope</caption>
                  <thead>
                    <tr>
                      <th scope="col">Service and scope</th>
                      <th scope="col">Completed keys whose effect is missing</th>
                      <th scope="col">Stale claims (effect present)</th>
                      <th scope="col">Last run</th>
                    </tr>
                  </thead>
                  <tbody>
                    {list.data.services.flatMap((entry) =>
                      (entry.scopes.length === 0 ? [{ scope: '', effectMissing: 0, staleClaims: 0, staleWithEffect: 0 }] : entry.scopes).map((scope) => (
                        <tr key={`${entry.service} ${scope.scope}`}>
                          <td data-label="Service and scope">
                            {entry.service}
                            {scope.scope === '' ? ', no findings' : `, ${scope.scope}`}
                          </td>
                          <td data-label="Completed keys whose effect is missing">
                            {scope.effectMissing > 0 ? (
                              <button type="button" className="link" disabled={disabled} onClick={() => ask({ service: entry.service, scope: scope.scope, kind: 'effect_missing' })}>
                                {scope.effectMissing}
                              </button>
                            ) : (
                              0
                            )}
                          </td>
                          <td data-label="Stale claims (effect present)">
                            {scope.staleClaims > 0 ? (
                              <button type="button" className="link" disabled={disabled} onClick={() => ask({ service: entry.service, scope: scope.scope, kind: 'stale_claim' })}>
                                {scope.staleClaims} ({scope.staleWithEffect})
                              </button>
                            ) : (
                              0
                            )}
                          </td>
                          <td data-label="Last run">
                            {entry.lastRunAt ? formatDateTime(entry.lastRunAt) : 'none'}; {entry.examined} read, {entry.effectErrors} effect check{entry.effectErrors === 1 ? '' : 's'} failed
                            {entry.unlisted > 0 ? `; ${entry.unlisted} not listed (list full)` : ''}
                          </td>
                        </tr>
                      )),
                    )}
                  </tbody>
                </table>
              </div>
              {list.data.findings.length === 0 ? (
                <p className="empty">No findings.</p>
              ) : (
                <div className="table-scroll">
                  <table className="stack">
                    <caption className="visually-hidden">Findings, newest found first</caption>
                    <thead>
                      <tr>
                        <th scope="col">Found</th>
                        <th scope="col">Finding</th>
                        <th scope="col">Service and scope</th>
                        <th scope="col">Principal</th>
                        <th scope="col">Idempotency key</th>
                        <th scope="col">Correlation id</th>
                        <th scope="col">Effect</th>
                      </tr>
                    </thead>
                    <tbody>
                      {list.data.findings.map((row) => (
                        <tr key={`${row.principalId} ${row.service} ${row.scope} ${row.key}`}>
                          <td data-label="Found">{formatDateTime(row.foundAt)}</td>
                          <td data-label="Finding">{kindLabels[row.kind]}</td>
                          <KeyIdentityCells row={row} onOpen={onOpen} />
                          <td data-label="Effect">{effectLabels[row.effect]}</td>
                        </tr>
                      ))}
                    </tbody>
                  </table>
                  {list.data.more ? <p className="muted small">More than these; the newest found are listed.</p> : null}
                </div>
              )}
            </>
          )
        ) : null}
      </div>
    </section>
  );
}
