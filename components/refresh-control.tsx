'use client';
// "Refresh now" and when the data was last fetched. Not a live region: announcing the time on
// every refresh would talk over whatever a screen-reader user is reading.
// The time appears once hydrated, in the browser's zone (the server cannot know it).
import { useHydrated } from './local-time';

export function RefreshControl({ isFetching, updatedAt, onRefresh }: { isFetching: boolean; updatedAt: number; onRefresh: () => void }) {
  const hydrated = useHydrated();
  return (
    <>
      <button type="button" onClick={onRefresh} disabled={isFetching}>
        {isFetching ? 'Refreshing…' : 'Refresh now'}
      </button>
      <span className="muted small">
        Last updated {hydrated && updatedAt ? new Date(updatedAt).toLocaleTimeString() : '—'}
      </span>
    </>
  );
}
