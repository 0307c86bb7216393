'use client';
// The keys whose work ran and whose completion could not be recorded (the overview's
// "Completions not recorded" check links here): principal, service, scope, key, correlation id,
// when and the error's class, newest first, never a response body. Uses the Reason of the lookup
// form; each listing is audited with it. Each row opens the key's own lookup.
import { useMutation } from '@tanstack/react-query';
import { useState } from 'react';
import type { UnrecordedAnswer, UnrecordedCompletion } from '@/server/idempotency/unrecorded';
import { adminFetch } from '../admin-fetch';
import { Problem } from '../banners';
import { formatDateTime } from '../overview/format';
import { KeyIdentityCells } from './key-identity-cells';

const windows = [
  { minutes: 60, label: 'the last hour' },
  { minutes: 1_440, label: 'the last 24 hours' },
  { minutes: 10_080, label: 'the last 7 days' },
] as const;

export function UnrecordedCompletions({ reason, service, onOpen }: { reason: string; service: string; onOpen: (completion: UnrecordedCompletion) => void }) {
  const [minutes, setMinutes] = useState<number>(60);
  const list = useMutation({
    mutationFn: (input: { reason: string; service?: string; minutes: number }) =>
      adminFetch<UnrecordedAnswer>('/api/admin/keys/unrecorded', { method: 'POST', body: input, fieldLabels: { reason: 'Reason', service: 'Service' } }),
  });
  return (
    <section id="unrecorded" className="card" aria-labelledby="unrecorded-heading">
      <h2 id="unrecorded-heading">Unrecorded completions</h2>
      <p className="muted small">
        Requests whose work ran and whose response could not be recorded: a retry after the lease runs the work again. Check each effect by its correlation id.
      </p>
      <form
        className="toolbar"
        onSubmit={(event) => {
          event.preventDefault();
          list.mutate({ reason, minutes, ...(service === '' ? {} : { service }) });
        }}
      >
        <label>
          Since
          <select name="window" value={minutes} onChange={(event) => setMinutes(Number(event.target.value))}>
            {windows.map((window) => (
              <option key={window.minutes} value={window.minutes}>
                {window.label}
              </option>
            ))}
          </select>
        </label>
        <button type="submit" disabled={list.isPending || reason.trim().length < 3}>
          List unrecorded completions
        </button>
        <span className="muted small">{service === '' ? 'Every service' : `Service ${service}`}; uses the Reason above; audited.</span>
      </form>
      <div role="status" className="results">
        {list.error ? <Problem>{list.error.message}</Problem> : null}
        {list.data ? (
          list.data.completions.length === 0 ? (
            <p className="empty">None in that window.</p>
          ) : (
            <div className="table-scroll">
              <table className="stack">
                <caption className="visually-hidden">Unrecorded completions, newest first</caption>
                <thead>
                  <tr>
                    <th scope="col">When</th>
                    <th scope="col">Service and scope</th>
                    <th scope="col">Principal</th>
                    <th scope="col">Idempotency key</th>
                    <th scope="col">Correlation id</th>
                    <th scope="col">Error</th>
                  </tr>
                </thead>
                <tbody>
                  {list.data.completions.map((row) => (
                    <tr key={`${row.principalId} ${row.service} ${row.scope} ${row.key} ${row.correlationId}`}>
                      <td data-label="When">{formatDateTime(row.at)}</td>
                      <KeyIdentityCells row={row} onOpen={onOpen} />
                      <td data-label="Error">{row.errorClass}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
              {list.data.more ? <p className="muted small">More than these; the newest are listed.</p> : null}
            </div>
          )
        ) : null}
      </div>
    </section>
  );
}
