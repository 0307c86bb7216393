'use client';
// Stale claims: in-progress attempts past their lease (a handler crashed or hung), oldest
// first. A retry already takes such a key over; releasing marks it failed and retryable so it
// stops showing as running. Behind a confirmation with a reason, audited. Only a Postgres-kept
// claim has a Release button (`releasable`): a MySQL-kept one is released by its service's sweep.
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import Link from 'next/link';
import { useEffect, useRef, useState } from 'react';
import { useRouter } from 'next/navigation';
import type { ListedStaleClaim as StaleClaim } from '@/server/idempotency/key-metadata';
import { adminFetch, refreshEvery } from '../admin-fetch';
import { DialogActions, useFocusReason } from '../dialog-actions';
import { queryKeys, STALE_CLAIMS_SHOWN } from '../query-keys';
import { RefreshControl } from '../refresh-control';
import { LocalTime } from '../local-time';
import { formatDuration } from '../overview/format';
import { LoadProblem, Notice } from '../banners';
import { formText } from '../form-text';
import { Options } from '../options';

const claimsHref = (service: string | null) => (service ? `/claims?${new URLSearchParams({ service }).toString()}` : '/claims');
const fetchClaims = async (service: string | null) => {
  const query = new URLSearchParams({ limit: String(STALE_CLAIMS_SHOWN) });
  if (service) query.set('service', service);
  return (await adminFetch<{ claims: StaleClaim[] }>(`/api/admin/stale-claims?${query.toString()}`)).claims;
};

async function release(input: { claim: StaleClaim; reason: string }): Promise<void> {
  const { principalId, service, scope, key } = input.claim;
  await adminFetch('/api/admin/stale-claims/release', { method: 'POST', body: { principalId, service, scope, key, reason: input.reason } });
}

export function StaleClaims({ service, services, notices = [] }: { service: string | null; services: string[]; notices?: string[] }) {
  const client = useQueryClient();
  const router = useRouter();
  // What the server corrected in the URL stays said after the URL itself is corrected.
  const [corrections] = useState(notices);
  const corrected = notices.length > 0;
  useEffect(() => {
    if (corrected) router.replace(claimsHref(service), { scroll: false });
  }, [corrected, service, router]);
  const claims = useQuery({ queryKey: queryKeys.staleClaims(service), queryFn: () => fetchClaims(service), refetchInterval: refreshEvery(30_000) });
  const [chosen, setChosen] = useState<StaleClaim | null>(null);
  const [done, setDone] = useState<string | null>(null);
  const dialog = useRef<HTMLDialogElement>(null);
  const releasing = useMutation({
    mutationFn: release,
    onSuccess: (_result, input) => {
      setDone(`Released ${input.claim.key} (${input.claim.scope} of ${input.claim.service}). It is recorded in the audit log.`);
      dialog.current?.close();
      void client.invalidateQueries({ queryKey: queryKeys.staleClaims() });
    },
  });
  useFocusReason(dialog, 'release-reason', chosen);
  const open = (claim: StaleClaim) => {
    setChosen(claim);
    setDone(null);
    releasing.reset();
    dialog.current?.showModal();
  };

  return (
    <>
      {corrections.length > 0 ? (
        <Notice>
          {corrections.join(' ')} The address has been corrected.
        </Notice>
      ) : null}
      {done ? (
        <Notice>
          {done}
        </Notice>
      ) : null}
      {claims.error ? (
        <LoadProblem error={claims.error} what="stale claims" />
      ) : null}
      <div className="toolbar">
        <label>
          Service
          {/* The service looked at is a history entry, so Back returns to it. */}
          <select value={service ?? ''} onChange={(event) => router.push(claimsHref(event.target.value || null), { scroll: false })}>
            <option value="">All services</option>
            <Options values={[...new Set([...services, ...(service ? [service] : [])])]} />
          </select>
        </label>
        <RefreshControl isFetching={claims.isFetching} updatedAt={claims.dataUpdatedAt} onRefresh={() => void claims.refetch()} />
      </div>
      {claims.data && claims.data.length === 0 ? <p className="empty card">No stale claim{service ? ` in ${service}` : ''}: every in-progress attempt is within its lease.</p> : null}
      {claims.data && claims.data.length > 0 ? (
        <div className="card table-scroll">
          <table className="stack claims">
            <caption className="visually-hidden">Stale claims, oldest lease first</caption>
            <thead>
              <tr>
                <th scope="col">Principal</th>
                <th scope="col">Service</th>
                <th scope="col">Scope</th>
                <th scope="col">Key</th>
                <th scope="col">Past its lease</th>
                <th scope="col">Created</th>
                <th scope="col" className="num">
                  Attempts
                </th>
                <th scope="col">
                  <span className="visually-hidden">Action</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {claims.data.map((claim) => (
                <tr key={`${claim.principalId} ${claim.service} ${claim.scope} ${claim.key}`}>
                  <td className="nowrap principal" data-label="Principal">
                    <code title={claim.principalId}>{claim.principalId}</code>
                  </td>
                  <td className="nowrap" data-label="Service">
                    {claim.service}
                  </td>
                  <td className="nowrap" data-label="Scope">
                    {claim.scope}
                  </td>
                  <td data-label="Key">
                    <code>{claim.key}</code>
                  </td>
                  <td className="nowrap" data-label="Past lease">
                    {formatDuration(claim.pastLeaseSeconds)}
                  </td>
                  <td className="nowrap" data-label="Created">
                    <LocalTime iso={claim.createdAt} />
                  </td>
                  <td className="num" data-label="Attempts">
                    {claim.attempts}
                  </td>
                  <td className="nowrap row-actions" data-label="Actions">
                    <Link className="button-link" href={`/keys?${new URLSearchParams({ principalId: claim.principalId, service: claim.service, key: claim.key }).toString()}`} aria-label={`Look up ${claim.key}`}>
                      Look up
                    </Link>{' '}
                    {claim.releasable ? (
                      <button type="button" className="link" onClick={() => open(claim)} aria-label={`Release ${claim.key}`}>
                        Release
                      </button>
                    ) : (
                      // Kept in MySQL or Redis: the dashboard does not write there.
                      <span className="muted">released by its own sweeper or the next retry</span>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
      <dialog ref={dialog} aria-labelledby="release-title" className="card">
        <form
          method="dialog"
          className="form"
          onSubmit={(event) => {
            event.preventDefault();
            if (!chosen) return;
            releasing.mutate({ claim: chosen, reason: formText(new FormData(event.currentTarget), 'reason') });
          }}
        >
          <h2 id="release-title">Release this claim?</h2>
          <p>
            <code>{chosen?.key}</code> in {chosen?.scope} of {chosen?.service} will be marked failed, so the next retry runs the operation again. Release it only once you
            know the original attempt did not complete its effect.
          </p>
          <label htmlFor="release-reason">Reason</label>
          {/* Keyed by the claim, so each release starts with an empty reason. */}
          <input key={chosen ? `${chosen.principalId} ${chosen.service} ${chosen.scope} ${chosen.key}` : 'none'} id="release-reason" name="reason" required minLength={3} maxLength={500} placeholder="e.g. processor confirms refund r_123 never ran" />
          <DialogActions error={releasing.error} pending={releasing.isPending} confirm="Release claim" pendingLabel="Releasing…" onCancel={() => dialog.current?.close()} />
        </form>
      </dialog>
    </>
  );
}
