// Rendered with status 403 when a signed-in operator opens a page above their role.
import Link from 'next/link';

export default function Forbidden() {
  return (
    <main id="content" tabIndex={-1} className="narrow">
      <h1>Not allowed</h1>
      <p>Your role does not include this page. Ask an admin if you need it.</p>
      <p>
        <Link href="/">Back to the overview</Link>
      </p>
    </main>
  );
}
