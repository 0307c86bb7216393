// The dashboard's two message banners: a confirmation (announced politely) and a problem
// (announced at once). Severity banners for alerts are the overview's own.
import type { ReactNode } from 'react';
import { sessionEnded } from './admin-fetch';

export function Notice({ children }: { children: ReactNode }) {
  return (
    <div className="banner ok" role="status">
      {children}
    </div>
  );
}

export function Problem({ children }: { children: ReactNode }) {
  return (
    <div className="banner critical" role="alert">
      {children}
    </div>
  );
}

/**
 * A failed load: the server's words, or, when the session has ended, a sign-in link back to
 * this page (auto-refresh stops: see refreshEvery).
 */
export function LoadProblem({ error, what, stale = false }: { error: Error; what: string; stale?: boolean }) {
  if (sessionEnded(error)) {
    const back = typeof window === 'undefined' ? '/' : `${window.location.pathname}${window.location.search}`;
    return (
      <Problem>
        <strong>Your session has ended.</strong> Auto-refresh has stopped{stale ? '; the figures below are from before' : ''}.{' '}
        <a href={`/login?${new URLSearchParams({ next: back }).toString()}`}>Sign in again</a>
      </Problem>
    );
  }
  return (
    <Problem>
      <strong>Could not load {what}.</strong> {error.message}
      {stale ? ' The figures below are from the last successful refresh.' : ''}
    </Problem>
  );
}
