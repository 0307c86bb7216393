'use client';
// "Refresh now" and when the data was last fetched, announced politely to screen readers.
export function RefreshControl({ isFetching, updatedAt, onRefresh }: { isFetching: boolean; updatedAt: number; onRefresh: () => void }) {
  return (
    <>
      <button type="button" onClick={onRefresh} disabled={isFetching}>
        {isFetching ? 'Refreshing…' : 'Refresh now'}
      </button>
      <span className="muted small" aria-live="polite">
        Last updated {updatedAt ? new Date(updatedAt).toLocaleTimeString() : '—'}
      </span>
    </>
  );
}
