'use client';
// A request by the X-Correlation-Id a customer quotes: which principal, service, scope and key
// it was, across the store, with the key's metadata (never a response body). Uses the Reason of
// the lookup form; each search is audited with it.
import { useMutation } from '@tanstack/react-query';
import { useState } from 'react';
import type { CorrelationRecord } from '@/server/idempotency/correlation';
import { adminFetch } from '../admin-fetch';
import { Problem } from '../banners';
import { formatDateTime } from '../overview/format';

const stateLabels: Record<CorrelationRecord['state'], string> = { in_progress: 'in progress', completed: 'completed', failed: 'failed (retryable)' };

export function CorrelationLookup({ reason, onOpen }: { reason: string; onOpen: (record: CorrelationRecord) => void }) {
  const [correlationId, setCorrelationId] = useState('');
  const [asked, setAsked] = useState('');
  const lookup = useMutation({
    mutationFn: (input: { correlationId: string; reason: string }) =>
      adminFetch<{ records: CorrelationRecord[] }>('/api/admin/keys/correlation', {
        method: 'POST',
        body: input,
        fieldLabels: { correlationId: 'Correlation id', reason: 'Reason' },
      }),
  });
  return (
    <section className="card" aria-labelledby="correlation-heading">
      <h2 id="correlation-heading">Find a request by correlation id</h2>
      <form
        className="toolbar"
        onSubmit={(event) => {
          event.preventDefault();
          setAsked(correlationId.trim());
          lookup.mutate({ correlationId: correlationId.trim(), reason });
        }}
      >
        <label className="wide">
          Correlation id
          <input name="correlationId" required autoComplete="off" spellCheck={false} placeholder="X-Correlation-Id, a UUID" value={correlationId} onChange={(event) => setCorrelationId(event.target.value)} />
        </label>
        <button type="submit" disabled={lookup.isPending || reason.trim().length < 3}>
          Find request
        </button>
        <span className="muted small">Uses the Reason above; audited.</span>
      </form>
      {lookup.error ? <Problem>{lookup.error.message}</Problem> : null}
      <div role="status">
        {lookup.data ? (
          lookup.data.records.length === 0 ? (
            <p className="empty">
              No live key has the correlation id <code>{asked}</code>: it may have expired, or the id was mistyped.
            </p>
          ) : (
            lookup.data.records.map((record) => (
              <article key={`${record.principalId} ${record.service} ${record.scope} ${record.key}`} aria-label={`Request ${record.correlationId}`}>
                <dl>
                  <dt>Principal</dt>
                  <dd>
                    {record.principalName ?? 'no name'} <code>{record.principalId}</code>
                  </dd>
                  <dt>Service and scope</dt>
                  <dd>
                    {record.service}, {record.scope}
                  </dd>
                  <dt>Idempotency key</dt>
                  <dd>
                    <code>{record.key}</code>
                  </dd>
                  <dt>State</dt>
                  <dd>
                    {stateLabels[record.state]}
                    {record.statusCode === null ? '' : `, status ${record.statusCode}`}
                  </dd>
                  <dt>Created</dt>
                  <dd>{formatDateTime(record.createdAt)}</dd>
                </dl>
                <button type="button" className="link" onClick={() => onOpen(record)}>
                  Show this key and its principal
                </button>
              </article>
            ))
          )
        ) : null}
      </div>
    </section>
  );
}
