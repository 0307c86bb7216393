'use client';
// "Principals behind conflicts, mismatches, rejections and stale claims": who is behind the
// trouble in the chosen range, service and scope, from the recorder's top-K summaries (counts
// are lower bounds within the stated error) and the key table's stale claims. Each row links
// to that principal's keys on /keys, filtered by the state that matches its trouble.
import type { PrincipalsBehind } from '@/server/metrics/principals';
import { formatCount, formatPercent } from './format';

type Row = PrincipalsBehind['principals'][number];

const columns = [
  ['conflict', 'Conflicts'],
  ['mismatch', 'Mismatches'],
  ['rejected', 'Rejections'],
  ['takeover', 'Takeovers'],
  ['error', 'Errors'],
] as const;

/**
 * The key state that shows a row's trouble: running claims for stale claims, failed ones for
 * errors, completed ones for mismatches (a key reused for another request); conflicts and
 * takeovers hit keys that have mostly completed since, so those list every state.
 */
function stateFor(row: Row): 'in_progress' | 'failed' | 'completed' | null {
  if (row.staleClaims > 0) return 'in_progress';
  const top = columns.reduce<(typeof columns)[number][0]>((best, [outcome]) => (row.counts[outcome] > row.counts[best] ? outcome : best), 'conflict');
  if (row.counts[top] === 0) return null;
  if (top === 'error') return 'failed';
  if (top === 'mismatch') return 'completed';
  return null;
}

export function keysHref(row: Row, service: string | null, scope: string | null): string {
  const params = new URLSearchParams({ principalId: row.principalId });
  if (service) params.set('service', service);
  if (scope) params.set('scope', scope);
  const state = stateFor(row);
  if (state) params.set('state', state);
  return `/keys?${params.toString()}`;
}

export function PrincipalsTable({ data, service, scope }: { data: PrincipalsBehind; service: string | null; scope: string | null }) {
  const trouble = (row: Row) => columns.reduce((sum, [outcome]) => sum + row.counts[outcome], 0);
  return (
    <section className="card" id="principals" aria-labelledby="principals-heading">
      <h3 id="principals-heading">Principals behind conflicts, mismatches, rejections and stale claims</h3>
      {data.principals.length === 0 ? (
        <p className="empty">No principal had a conflict, mismatch, rejection, takeover, error or stale claim in this range{scope ? ` on ${scope}` : ''}.</p>
      ) : (
        <>
          <div className="table-scroll">
            <table className="stack principals">
              <caption className="visually-hidden">Principals with the most trouble first</caption>
              <thead>
                <tr>
                  <th scope="col">Principal</th>
                  {columns.map(([outcome, label]) => (
                    <th key={outcome} scope="col" className="num">
                      {label}
                    </th>
                  ))}
                  <th scope="col" className="num">
                    Stale claims
                  </th>
                  <th scope="col" className="num">
                    Claims
                  </th>
                  <th scope="col" className="num">
                    Share of their claims
                  </th>
                  <th scope="col">
                    <span className="visually-hidden">Keys</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {data.principals.map((row) => {
                  const label = row.name ?? row.principalId;
                  return (
                    <tr key={row.principalId}>
                      <th scope="row" className="principal">
                        {row.name ? (
                          <>
                            {row.name}
                            <br />
                            <code className="muted small">{row.principalId}</code>
                          </>
                        ) : (
                          <code>{row.principalId}</code>
                        )}
                      </th>
                      {columns.map(([outcome, heading]) => (
                        <td key={outcome} className="num" data-label={heading}>
                          {formatCount(row.counts[outcome])}
                        </td>
                      ))}
                      <td className="num" data-label="Stale claims">
                        {formatCount(row.staleClaims)}
                      </td>
                      <td className="num" data-label="Claims">
                        {row.counts.claims > 0 ? formatCount(row.counts.claims) : '—'}
                      </td>
                      <td className="num" data-label="Share">
                        {row.counts.claims > 0 ? formatPercent(Math.min(1, trouble(row) / row.counts.claims)) : '—'}
                      </td>
                      <td className="nowrap row-actions">
                        <a href={keysHref(row, service, scope)} aria-label={`Keys of ${label}`}>
                          Keys
                        </a>
                      </td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          </div>
          <p className="muted small">
            Counts come from a top-{data.k} summary per scope and minute, so each is a lower bound: at most N/{data.k + 1} short, N that
            outcome&apos;s events in this range (conflicts up to {formatCount(Math.floor(data.errorBound.conflict))}, mismatches up to{' '}
            {formatCount(Math.floor(data.errorBound.mismatch))}). Stale claims are counted exactly, now.
          </p>
        </>
      )}
    </section>
  );
}
