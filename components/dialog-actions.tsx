'use client';
import { useEffect, type RefObject } from 'react';
// The foot of a confirmation dialog: the server's refusal, if any, then Cancel and the confirming button.
export function DialogActions({ error, pending, confirm, pendingLabel, onCancel }: { error: Error | null; pending: boolean; confirm: string; pendingLabel: string; onCancel: () => void }) {
  return (
    <>
      {error ? (
        <p className="bad" role="alert">
          {error.message}
        </p>
      ) : null}
      <div className="actions">
        <button type="button" className="link" onClick={onCancel}>
          Cancel
        </button>
        <button type="submit" disabled={pending}>
          {pending ? pendingLabel : confirm}
        </button>
      </div>
    </>
  );
}

/**
 * Focus a confirmation dialog's reason field once it is open with its content: showModal()
 * focuses the first focusable element, which may be rendered (or re-keyed) only after it.
 * `opened`: what the dialog was opened for (a new value each opening).
 */
export function useFocusReason(dialog: RefObject<HTMLDialogElement | null>, fieldId: string, opened: unknown): void {
  useEffect(() => {
    if (opened && dialog.current?.open) document.getElementById(fieldId)?.focus();
  }, [dialog, fieldId, opened]);
}
