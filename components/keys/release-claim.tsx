'use client';
// On a looked-up key that is in progress past its lease: say so, and offer the same audited
// release as the stale-claims page (operator), behind a confirmation that asks for the reason.
import { useMutation } from '@tanstack/react-query';
import { useId, useRef, useState } from 'react';
import type { KeyRecord } from '@/server/idempotency/key-metadata';
import { adminFetch } from '../admin-fetch';
import { DialogActions, useFocusReason } from '../dialog-actions';
import { formatDuration } from '../overview/format';
import { formText } from '../form-text';

export function LeasePassed({ record, principalId, keyName, onReleased }: { record: Pick<KeyRecord, 'service' | 'scope' | 'leasePassedSeconds'>; principalId: string; keyName: string; onReleased: () => void }) {
  const id = useId();
  const dialog = useRef<HTMLDialogElement>(null);
  const [opened, setOpened] = useState(0);
  const [released, setReleased] = useState(false);
  const release = useMutation({
    mutationFn: (reason: string) =>
      adminFetch('/api/admin/stale-claims/release', { method: 'POST', body: { principalId, service: record.service, scope: record.scope, key: keyName, reason }, fieldLabels: { reason: 'Reason' } }),
    onSuccess: () => {
      setReleased(true);
      dialog.current?.close();
      onReleased();
    },
  });
  useFocusReason(dialog, `${id}-reason`, opened);
  if (released) return <p className="ok">Released: the next retry runs the operation again. Recorded in the audit log.</p>;
  return (
    <div className="banner warning lease-passed">
      <p>
        <strong>Lease passed {formatDuration(record.leasePassedSeconds)} ago.</strong> The attempt that claimed this key crashed or hung: a retry takes it over, or release it
        once you know its effect did not happen.
      </p>
      <div className="actions">
        <button
          type="button"
          onClick={() => {
            release.reset();
            dialog.current?.showModal();
            setOpened((count) => count + 1);
          }}
        >
          Release
        </button>
      </div>
      <dialog ref={dialog} aria-labelledby={`${id}-title`} className="card">
        <form
          method="dialog"
          className="form"
          onSubmit={(event) => {
            event.preventDefault();
            release.mutate(formText(new FormData(event.currentTarget), 'reason'));
          }}
        >
          <h2 id={`${id}-title`}>Release this claim?</h2>
          <p>
            <code>{keyName}</code> in {record.scope} of {record.service} will be marked failed, so the next retry runs the operation again.
          </p>
          <label htmlFor={`${id}-reason`}>Reason</label>
          <input id={`${id}-reason`} name="reason" required minLength={3} maxLength={500} placeholder="e.g. processor confirms refund r_123 never ran" />
          <DialogActions error={release.error} pending={release.isPending} confirm="Release claim" pendingLabel="Releasing…" onCancel={() => dialog.current?.close()} />
        </form>
      </dialog>
    </div>
  );
}
