'use client';
// Retention review: each endpoint's published promise against what is applied, the change
// history with breaking changes flagged, and the sweeper's evidence, all exportable as CSV.
// Admins edit a policy here; the server refuses a retention below the documented window and
// asks for an explicit acknowledgement of a breaking change.
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useEffect, useRef, useState } from 'react';
import { useRouter } from 'next/navigation';
import type { PolicyReview, RetentionReview as Review } from '@/server/retention/review';
import { adminFetch, refreshEvery } from '../admin-fetch';
import { DialogActions } from '../dialog-actions';
import { queryKeys } from '../query-keys';
import { LocalTime } from '../local-time';
import { formatCount, formatDuration, formatRowsDeleted } from '../overview/format';
import { LoadProblem, Notice } from '../banners';
import { changeWords, durationWords, policyChanges } from '@/server/retention/policy-words';
import { DownloadProblem, useDownload } from '../download';
import { Options } from '../options';
import { CapacityStats } from '../overview/overview-dashboard';

const withService = (path: string, service: string | null, params: Record<string, string> = {}) => {
  const query = new URLSearchParams(params);
  if (service) query.set('service', service);
  const text = query.toString();
  return text ? `${path}?${text}` : path;
};
const fetchReview = (service: string | null) => adminFetch<Review>(withService('/api/admin/retention', service));

interface PolicyEdit {
  policy: PolicyReview;
  windowHours: number;
  retentionHours: number;
  scopeMode: 'endpoint' | 'intent';
  reason: string;
  acknowledge: boolean;
}

async function savePolicy(edit: PolicyEdit): Promise<void> {
  const { policy } = edit;
  await adminFetch('/api/admin/policies', {
    method: 'POST',
    fieldLabels: { reason: 'Reason' },
    body: {
      service: policy.service,
      endpoint: policy.endpoint,
      expectedVersion: policy.version,
      reason: edit.reason,
      acknowledgeBreakingChange: edit.acknowledge,
      fields: {
        scopeMode: edit.scopeMode,
        retryWindowSeconds: Math.round(edit.windowHours * 3_600),
        retentionSeconds: Math.round(edit.retentionHours * 3_600),
        leaseMs: policy.leaseMs,
        lockTimeoutMs: policy.lockTimeoutMs,
        maxResponseBytes: policy.maxResponseBytes,
        liveKeyQuota: policy.liveKeyQuota,
      },
    },
  });
}

const hours = (seconds: number) => Number((seconds / 3_600).toFixed(2));
const exportKinds = [
  ['policies', 'Policies'],
  ['history', 'Change history'],
  ['evidence', 'Sweeper evidence'],
] as const;

/**
 * A route's own policy in code against the published one: its requests run on the code's values,
 * so a difference is said here (and in the JSON), never resolved silently. Admins settle it by
 * changing the published policy or the code.
 */
function CodePolicyCell({ policy }: { policy: PolicyReview }) {
  if (!policy.code) return <span className="muted">none: runs on the published policy</span>;
  if (policy.codeDifferences.length === 0) return <span>the route's own, same as published</span>;
  return (
    <>
      <span className="badge fail">Differs</span>{' '}
      <span>
        the route runs on its own:{' '}
        {policy.codeDifferences.map((difference) => `${difference.label} ${difference.code} in code, ${difference.published} published`).join('; ')}
      </span>
    </>
  );
}

export function RetentionReview({ canEdit, service, notices = [] }: { canEdit: boolean; service: string | null; notices?: string[] }) {
  const client = useQueryClient();
  const router = useRouter();
  // What the server corrected in the URL stays said after the URL itself is corrected.
  const [corrections] = useState(notices);
  const corrected = notices.length > 0;
  useEffect(() => {
    if (corrected) router.replace(withService('/retention', service), { scroll: false });
  }, [corrected, service, router]);
  const review = useQuery({ queryKey: queryKeys.retention(service), queryFn: () => fetchReview(service), refetchInterval: refreshEvery(60_000), placeholderData: (previous) => previous });
  const dialog = useRef<HTMLDialogElement>(null);
  const [edit, setEdit] = useState<PolicyEdit | null>(null);
  const download = useDownload();
  const [saved, setSaved] = useState<string | null>(null);
  const save = useMutation({
    mutationFn: savePolicy,
    onSuccess: (_result, input) => {
      setSaved(`Saved the policy of ${input.policy.endpoint} (${input.policy.service}). The change is in the history and the audit log; keys claimed from now on get the new expiry.`);
      dialog.current?.close();
      void client.invalidateQueries({ queryKey: queryKeys.retention() });
    },
  });
  const open = (policy: PolicyReview) => {
    setEdit({ policy, windowHours: hours(policy.retryWindowSeconds), retentionHours: hours(policy.retentionSeconds), scopeMode: policy.scopeMode, reason: '', acknowledge: false });
    setSaved(null);
    save.reset();
    dialog.current?.showModal();
  };
  const breaking = edit ? edit.windowHours * 3_600 < edit.policy.retryWindowSeconds || edit.scopeMode !== edit.policy.scopeMode : false;
  const data = review.data;

  const shown = data?.service === service ? data : undefined;
  return (
    <>
      {corrections.length > 0 ? (
        <Notice>
          {corrections.join(' ')} The address has been corrected.
        </Notice>
      ) : null}
      {saved ? (
        <Notice>
          {saved}
        </Notice>
      ) : null}
      {review.error ? (
        <LoadProblem error={review.error} what="the retention review" />
      ) : null}
      <div className="toolbar">
        <label>
          Service
          {/* The service reviewed is what was looked at: a history entry, so Back returns to it. */}
          <select value={service ?? ''} onChange={(event) => router.push(withService('/retention', event.target.value || null), { scroll: false })}>
            <option value="">All services</option>
            <Options values={[...new Set([...(data?.services ?? []), ...(service ? [service] : [])])]} />
          </select>
        </label>
      </div>
      <div className="toolbar" role="group" aria-label="Exports">
        {exportKinds.map(([what, label]) => {
          const href = withService('/api/admin/retention/export', service, { what });
          return (
            <button key={what} type="button" className="button-link" onClick={() => download.start(href, `retrysafe-${what}${service ? `-${service}` : ''}.csv`)} aria-disabled={download.busy !== null}>
              {download.busy === href ? 'Exporting…' : `Export ${label.toLowerCase()} (CSV)`}
            </button>
          );
        })}
        {(() => {
          // The store is shared by every service: its export is the whole table's, whatever is chosen above.
          const href = '/api/admin/retention/export?what=store&range=30d';
          return (
            <button type="button" className="button-link" onClick={() => download.start(href, 'retrysafe-retention-store-30d.csv')} aria-disabled={download.busy !== null}>
              {download.busy === href ? 'Exporting…' : 'Export the store against its baseline, 30 days (CSV)'}
            </button>
          );
        })()}
        <span className="muted small">
          Each export is audited{service ? ` and holds ${service} only (the store's holds every service: they share the table)` : ''}. The evidence holds the last 10,000 sweeper runs that deleted or released something{service ? ` of ${service}` : ''}.
        </span>
      </div>
      <DownloadProblem failure={download.failure} />
      {shown ? (
        <>
          <section className="card" aria-labelledby="policies-heading">
            <h2 id="policies-heading">Policies against their promise</h2>
            <div className="table-scroll">
              <table className="stack">
                <caption className="visually-hidden">Policies against their promise</caption>
                <thead>
                  <tr>
                    <th scope="col">Service</th>
                    <th scope="col">Endpoint</th>
                    <th scope="col">Documented window</th>
                    <th scope="col">Retention applied</th>
                    <th scope="col">Margin</th>
                    <th scope="col">Scope</th>
                    <th scope="col">Sweeper evidence</th>
                    <th scope="col">Policy in code</th>
                    <th scope="col">Promise</th>
                    {canEdit ? (
                      <th scope="col">
                        <span className="visually-hidden">Edit</span>
                      </th>
                    ) : null}
                  </tr>
                </thead>
                <tbody>
                  {shown.policies.map((policy) => (
                    <tr key={`${policy.service} ${policy.endpoint}`}>
                      <td className="nowrap" data-label="Service">
                        {policy.service}
                      </td>
                      <td className="nowrap" data-label="Endpoint">
                        {policy.endpoint}
                      </td>
                      <td data-label="Window">{formatDuration(policy.retryWindowSeconds)}</td>
                      <td data-label="Retention">{formatDuration(policy.retentionSeconds)}</td>
                      <td data-label="Margin">{formatDuration(policy.marginSeconds)}</td>
                      <td data-label="Scope">{policy.scopeMode === 'endpoint' ? 'principal + endpoint' : 'principal (intent)'}</td>
                      <td data-label="Evidence">
                        {policy.evidenceMinMarginSeconds === null
                          ? 'nothing deleted yet'
                          : `${formatRowsDeleted(policy.evidenceRowsDeleted)}, all at least ${formatDuration(policy.evidenceMinMarginSeconds)} past the window`}
                      </td>
                      <td data-label="Policy in code">
                        <CodePolicyCell policy={policy} />
                      </td>
                      <td data-label="Promise">{policy.keepsPromise ? <span className="badge pass">Pass</span> : <span className="badge fail">Fail</span>}</td>
                      {canEdit ? (
                        <td data-label="Change">
                          <button type="button" className="link" onClick={() => open(policy)} aria-label={`Edit ${policy.endpoint} of ${policy.service}`}>
                            Edit
                          </button>
                        </td>
                      ) : null}
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          </section>

          <section className="card" aria-labelledby="history-heading">
            <h2 id="history-heading">Change history</h2>
            {shown.history.length === 0 ? (
              <p className="empty">No change yet.</p>
            ) : (
              <div className="table-scroll">
                <table className="stack">
                  <caption className="visually-hidden">Change history, newest first</caption>
                  <thead>
                    <tr>
                      <th scope="col">When</th>
                      <th scope="col">Service</th>
                      <th scope="col">Endpoint</th>
                      <th scope="col">Version</th>
                      <th scope="col">By</th>
                      <th scope="col">Change</th>
                      <th scope="col">Reason</th>
                    </tr>
                  </thead>
                  <tbody>
                    {shown.history.map((entry) => (
                      <tr key={entry.id} className={entry.breaking ? 'breaking' : undefined}>
                        <td className="nowrap" data-label="When">
                          <LocalTime iso={entry.changedAt} />
                        </td>
                        <td className="nowrap" data-label="Service">
                          {entry.service}
                        </td>
                        <td className="nowrap" data-label="Endpoint">
                          {entry.endpoint}
                        </td>
                        <td className="num" data-label="Version">
                          {entry.version}
                        </td>
                        <td data-label="By">{entry.changedBy}</td>
                        <td data-label="Change">
                          {entry.breaking ? <span className="badge fail">Breaking{entry.acknowledged ? ' (acknowledged)' : ''}</span> : null} {changeWords(entry.previous, entry.current)}
                        </td>
                        <td data-label="Reason">{entry.reason}</td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
            )}
          </section>

          <section className="card" aria-labelledby="capacity-heading">
            <h2 id="capacity-heading">Capacity</h2>
            <p className="muted small">
              The key table{service ? ` (shared by every service)` : ''} against the database&apos;s memory: with random keys, claims slow down once its unique index no longer fits (with time-ordered keys, such as UUIDv7, they need only its newest pages). The steady state is the rows {service ? service : 'the store'} settles at with the current new-key rate and each policy&apos;s retention.
            </p>
            <div className="stats">
              <CapacityStats capacity={shown.capacity} service={service} />
            </div>
          </section>

          <section className="card" aria-labelledby="sweeps-heading">
            <h2 id="sweeps-heading">Sweeper runs and their evidence</h2>
            <p className="muted small">
              Runs that deleted or released something{service ? ` of ${service}: rows deleted are its own, stale claims released are the run's across every service` : ''}, newest first. For each scope: the youngest deleted row&apos;s age at deletion, against the documented window (a negative margin would mean a key was deleted inside its window), and how long after its expiry the latest-deleted row went.
            </p>
            <p className="muted small" data-testid="expiry-removal">
              {shown.capacity.layout === 'partitioned'
                ? `How expired keys leave: this store is partitioned by expiry, and a partition is dropped whole once its range has ended, so a key promised ${formatDuration(shown.capacity.keptPastExpirySeconds)} or more stays up to ${formatDuration(shown.capacity.keptPastExpirySeconds)} past its expiry. A key promised less is deleted by the sweeper in bounded chunks within about one sweep interval of its expiry, as it would wait longer than its own retention for its partition. Either way it is never replayed after it. A run's rows deleted are the partitions it dropped and the shorter promises it deleted.`
                : 'How expired keys leave: the sweeper deletes them in bounded chunks at every run, so a key stays at most about one sweep interval past its expiry (it is never replayed after it).'}
            </p>
            {shown.sweeps.length === 0 ? (
              <p className="empty">
                {shown.capacity.layout === 'partitioned'
                  ? 'No sweep has deleted anything yet: keys are kept for their retention first, and those promised a day or more until their partition ends.'
                  : 'No sweep has deleted anything yet: keys are kept for their retention first.'}
              </p>
            ) : (
              <div className="table-scroll">
                <table className="stack">
                  <caption className="visually-hidden">Sweeper runs, newest first</caption>
                  <thead>
                    <tr>
                      <th scope="col">Run</th>
                      <th scope="col">Finished</th>
                      <th scope="col">Status</th>
                      <th scope="col" className="num">
                        Rows deleted
                      </th>
                      <th scope="col" className="num">
                        Stale released{service ? ' (all services)' : ''}
                      </th>
                      <th scope="col">Evidence per scope</th>
                    </tr>
                  </thead>
                  <tbody>
                    {shown.sweeps.map((run) => (
                      <tr key={run.runId}>
                        <td className="num" data-label="Run">
                          #{run.runId}
                        </td>
                        <td className="nowrap" data-label="Finished">
                          {run.finishedAt ? <LocalTime iso={run.finishedAt} /> : 'running'}
                        </td>
                        <td data-label="Status">
                          {run.status} ({run.trigger})
                        </td>
                        <td className="num" data-label="Deleted">
                          {formatCount(run.rowsDeleted)}
                        </td>
                        <td className="num" data-label="Released">
                          {run.staleReleased}
                        </td>
                        <td data-label="Evidence">
                          {run.scopes.length === 0
                            ? '—'
                            : run.scopes.map((scope) => (
                                <div key={`${scope.service} ${scope.scope}`}>
                                  {scope.scope} ({scope.service}): youngest {formatDuration(scope.minAgeSeconds)} old, window {formatDuration(scope.retryWindowSeconds)}, margin{' '}
                                  <span className={scope.minMarginSeconds !== null && scope.minMarginSeconds < 0 ? 'bad' : 'ok'}>{formatDuration(scope.minMarginSeconds)}</span>
                                  {scope.maxPastExpirySeconds === null ? null : `; the latest deleted ${formatDuration(scope.maxPastExpirySeconds)} after its expiry`}
                                </div>
                              ))}
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
            )}
          </section>
        </>
      ) : review.isPending || review.isPlaceholderData ? (
        <p className="empty">Loading the retention review…</p>
      ) : null}

      <dialog ref={dialog} aria-labelledby="edit-title" className="card">
        {edit ? (
          <form
            className="form"
            onSubmit={(event) => {
              event.preventDefault();
              save.mutate(edit);
            }}
          >
            <h2 id="edit-title">
              Edit {edit.policy.endpoint} ({edit.policy.service})
            </h2>
            <p className="muted small">Applies to keys claimed after the change; existing keys keep their expiry.</p>
            <label htmlFor="window-hours">Documented retry window (hours)</label>
            <input id="window-hours" type="number" min={0.01} step="any" required value={edit.windowHours} onChange={(event) => setEdit({ ...edit, windowHours: Number(event.target.value) })} />
            <label htmlFor="retention-hours">Retention applied (hours)</label>
            <input id="retention-hours" type="number" min={0.01} step="any" required value={edit.retentionHours} onChange={(event) => setEdit({ ...edit, retentionHours: Number(event.target.value) })} />
            <label htmlFor="scope-mode">Scope</label>
            <select id="scope-mode" value={edit.scopeMode} onChange={(event) => setEdit({ ...edit, scopeMode: event.target.value === 'intent' ? 'intent' : 'endpoint' })}>
              <option value="endpoint">Principal + endpoint</option>
              <option value="intent">Principal only (intent)</option>
            </select>
            <MarginPreview edit={edit} />
            <label htmlFor="policy-reason">Reason</label>
            <input id="policy-reason" required minLength={3} maxLength={1000} value={edit.reason} onChange={(event) => setEdit({ ...edit, reason: event.target.value })} />
            {breaking ? (
              <label className="check">
                <input type="checkbox" checked={edit.acknowledge} onChange={(event) => setEdit({ ...edit, acknowledge: event.target.checked })} />
                This breaks the promise to clients (late retries or earlier keys will run again). I acknowledge it.
              </label>
            ) : null}
            <DialogActions error={save.error} pending={save.isPending} confirm="Save policy" pendingLabel="Saving…" onCancel={() => dialog.current?.close()} />
          </form>
        ) : null}
      </dialog>
    </>
  );
}

/** What the edit will mean, before saving: the margin it leaves, or why it will be refused. */
function MarginPreview({ edit }: { edit: PolicyEdit }) {
  const window = Math.round(edit.windowHours * 3_600);
  const retention = Math.round(edit.retentionHours * 3_600);
  const margin = retention - window;
  const valid = Number.isFinite(margin) && window > 0 && retention > 0;
  const changes = policyChanges(
    { retryWindowSeconds: edit.policy.retryWindowSeconds, retentionSeconds: edit.policy.retentionSeconds, scopeMode: edit.policy.scopeMode },
    { retryWindowSeconds: window, retentionSeconds: retention, scopeMode: edit.scopeMode },
  );
  return (
    <output className={`margin-preview ${valid && margin >= 0 ? 'fine' : 'refused'}`} htmlFor="window-hours retention-hours scope-mode">
      {!valid ? (
        'Enter the window and the retention in hours.'
      ) : margin < 0 ? (
        <>
          <strong>This will be refused:</strong> retention must be at least the {durationWords(window)} retry window ({durationWords(-margin)} short).
        </>
      ) : (
        <>
          <strong>Margin {durationWords(margin)}</strong>: a retry at the end of the {durationWords(window)} window still finds its key for {durationWords(margin)}.
        </>
      )}
      {changes.length > 0 ? <span className="muted small"> Changes: {changes.map((change) => `${change.label.toLowerCase()} ${change.from} → ${change.to}`).join(', ')}.</span> : null}
    </output>
  );
}

