'use client';
// Exports as buttons: the file is fetched and saved under the server's file name. A plain
// link would turn a failed export (an ended session, a role too low) into a downloaded file
// holding an error, or a page of raw problem+json; here the failure shows on the page, with
// what to do. Exports are bounded server-side (the audit log's at 10,000 rows, the retention
// review's at what the review shows), so holding one in memory is fine. While one runs, the
// buttons stay focusable (aria-disabled) and further clicks are ignored.
import { useState } from 'react';
import Link from 'next/link';
import { Problem } from './banners';

export interface DownloadFailure {
  message: string;
  signIn: boolean;
}

/** The file name from `Content-Disposition: attachment; filename="..."`. */
function fileName(disposition: string | null, fallback: string): string {
  const match = disposition ? /filename="([^"]+)"/.exec(disposition) : null;
  return match?.[1] ?? fallback;
}

export function useDownload(): { start: (href: string, fallbackName: string) => void; busy: string | null; failure: DownloadFailure | null } {
  const [busy, setBusy] = useState<string | null>(null);
  const [failure, setFailure] = useState<DownloadFailure | null>(null);
  const run = async (href: string, fallbackName: string) => {
    if (busy !== null) return;
    setBusy(href);
    setFailure(null);
    try {
      const response = await fetch(href, { headers: { accept: 'text/csv, application/problem+json' } });
      if (response.status === 401) {
        setFailure({ message: 'Your session has ended, so nothing was exported.', signIn: true });
        return;
      }
      if (!response.ok) {
        const problem = (await response.json().catch(() => null)) as { title?: string } | null;
        setFailure({ message: `The export failed: ${problem?.title ?? `the server answered ${response.status}`}.`, signIn: false });
        return;
      }
      const url = URL.createObjectURL(await response.blob());
      const link = document.createElement('a');
      link.href = url;
      link.download = fileName(response.headers.get('content-disposition'), fallbackName);
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
    } catch {
      setFailure({ message: 'The export failed: the server could not be reached.', signIn: false });
    } finally {
      setBusy(null);
    }
  };
  return { start: (href, fallbackName) => void run(href, fallbackName), busy, failure };
}

export function DownloadProblem({ failure }: { failure: DownloadFailure | null }) {
  if (!failure) return null;
  return (
    <Problem>
      {failure.message}{' '}
      {failure.signIn ? <Link href={`/login?next=${encodeURIComponent(window.location.pathname)}`}>Sign in again</Link> : null}
    </Problem>
  );
}
