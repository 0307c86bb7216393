// The dashboard's two message banners: a confirmation (announced politely) and a problem
// (announced at once). Severity banners for alerts are the overview's own.
import type { ReactNode } from 'react';

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
