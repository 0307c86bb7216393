'use client';
// The access review's CSV export: a button (components/download.tsx), audited by the server.
import { DownloadProblem, useDownload } from '../download';

const HREF = '/api/admin/access-review?format=csv';

export function AccessReviewExport() {
  const download = useDownload();
  return (
    <>
      <div className="toolbar" role="group" aria-label="Exports">
        <button type="button" className="button-link" onClick={() => download.start(HREF, 'retrysafe-access-review.csv')} aria-disabled={download.busy !== null}>
          {download.busy === HREF ? 'Exporting…' : 'Export the access review (CSV)'}
        </button>
        <span className="muted small">The export is audited.</span>
      </div>
      <DownloadProblem failure={download.failure} />
    </>
  );
}
