// /access-review (compliance): who may sign in to the dashboard, with which role, since when,
// when they last signed in, and their last role change with who made it and why. Read-only
// (admins change operators on /operators); read through the dashboard's role.
import { requirePageOperator, dashboardReadPool } from '@/app/_lib/dashboard';
import { Problem } from '@/components/banners';
import { LocalTime } from '@/components/local-time';
import { AccessReviewExport } from '@/components/operators/access-review-export';
import { readAccessReview, type AccessReviewEntry } from '@/server/auth/access-review';
import { logger, describeError } from '@/server/logging';

export const dynamic = 'force-dynamic';

function When({ at }: { at: Date | null }) {
  return at === null ? <span className="muted">never</span> : <LocalTime iso={at.toISOString()} />;
}

export default async function AccessReviewPage() {
  await requirePageOperator('/access-review');
  let entries: AccessReviewEntry[] | null = null;
  try {
    entries = await readAccessReview(dashboardReadPool());
  } catch (error) {
    logger.error({ page: '/access-review', error: describeError(error) }, 'the access review could not be read');
  }
  return (
    <main id="content" tabIndex={-1} className="wide">
      <h1>Access review</h1>
      <p className="muted">Every operator who can or could sign in to this dashboard, with their role and its last change. Read-only: admins change operators on the Operators page, each change with a reason in the audit log.</p>
      <AccessReviewExport />
      {entries === null ? (
        <Problem>
          <strong>Could not read the access review.</strong> The database did not answer it; reload the page, and if it persists check the dashboard&apos;s database connection (the server&apos;s log has the error).
        </Problem>
      ) : (
        <section className="card" aria-labelledby="access-heading">
          <h2 id="access-heading">Operators ({entries.length})</h2>
          <div className="table-scroll">
            <table className="stack">
              <caption className="visually-hidden">Operators and their access, by email</caption>
              <thead>
                <tr>
                  <th scope="col">Email</th>
                  <th scope="col">Role</th>
                  <th scope="col">Enabled</th>
                  <th scope="col">Created</th>
                  <th scope="col">Last sign-in</th>
                  <th scope="col">Last role change</th>
                  <th scope="col">By</th>
                  <th scope="col">Reason</th>
                </tr>
              </thead>
              <tbody>
                {entries.map((entry) => (
                  <tr key={entry.email}>
                    <td data-label="Email">{entry.email}</td>
                    <td data-label="Role">{entry.role}</td>
                    <td data-label="Enabled">{entry.enabled ? 'yes' : 'no (disabled)'}</td>
                    <td className="nowrap" data-label="Created">
                      <When at={entry.createdAt} />
                    </td>
                    <td className="nowrap" data-label="Last sign-in">
                      <When at={entry.lastSignInAt} />
                    </td>
                    <td data-label="Last role change">
                      {entry.lastRoleChange === null ? <span className="muted">none recorded</span> : (
                        <>
                          <When at={entry.lastRoleChange.at} /> {entry.lastRoleChange.from === null ? `created as ${entry.lastRoleChange.to}` : `${entry.lastRoleChange.from} → ${entry.lastRoleChange.to}`}
                        </>
                      )}
                    </td>
                    <td data-label="By">{entry.lastRoleChange?.by ?? ''}</td>
                    <td data-label="Reason">{entry.lastRoleChange?.reason ?? ''}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </section>
      )}
    </main>
  );
}
