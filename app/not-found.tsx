// A page that does not exist: said plainly, with the way back to the overview (and the header,
// for a signed-in operator, to every page of their role).
import Link from 'next/link';

export default function NotFound() {
  return (
    <main id="content" tabIndex={-1} className="narrow not-found">
      <p className="code" aria-hidden="true">
        404
      </p>
      <h1>Page not found</h1>
      <p className="muted">There is no page at this address. It may have moved, or the link may be mistyped.</p>
      <div className="actions">
        <Link href="/" className="button-link">
          Back to the overview
        </Link>
      </div>
    </main>
  );
}
