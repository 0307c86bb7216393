'use client';
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
