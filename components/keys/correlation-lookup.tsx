'use client';
// A request by the X-Correlation-Id a customer quotes: which principal, service, scope and key
// it was, across the store, with the key's metadata (never a response body). Uses the Reason of
// the lookup form; each search is audited with it.
import { useMutation } from '@tanstack/react-query';
import { useEffect, useRef, useState } from 'react';
import type { CorrelationAnswer, CorrelationRecord } from '@/server/idempotency/correlation';
import { adminFetch } from '../admin-fetch';
import { Problem } from '../banners';
import { formatDateTime } from '../overview/format';

const stateLabels: Record<CorrelationRecord['state'], string> = { in_progress: 'in progress', completed: 'completed', failed: 'failed (retryable)' };
const attemptLabels: Record<CorrelationAnswer['attempts'][number]['outcome'], string> = {
  replay: 'a replay',
  conflict: 'a conflict (409, the key was in flight)',
  mismatch: 'a mismatch (422, another body for the key)',
  rejected: 'a quota refusal (429)',
};

type Opened = Pick<CorrelationRecord, 'principalId' | 'key' | 'service'>;

export function CorrelationLookup({ reason, onOpen }: { reason: string; onOpen: (record: Opened) => void }) {
  const [correlationId, setCorrelationId] = useState('');
  const [asked, setAsked] = useState('');
  const lookup = useMutation({
    mutationFn: (input: { correlationId: string; reason: string }) =>
      adminFetch<CorrelationAnswer>('/api/admin/keys/correlation', {
        method: 'POST',
        body: input,
        fieldLabels: { correlationId: 'Correlation id', reason: 'Reason' },
      }),
  });
  // Once a search settles, focus goes to what it found (the button is disabled meanwhile).
  const found = useRef<HTMLDivElement>(null);
  const focusFound = useRef(false);
  useEffect(() => {
    if (!focusFound.current || lookup.isPending) return;
    focusFound.current = false;
    found.current?.focus();
  }, [lookup.isPending, lookup.data, lookup.error]);
  return (
    <section className="card" aria-labelledby="correlation-heading">
      <h2 id="correlation-heading">Find a request by correlation id</h2>
      <form
        className="toolbar"
        onSubmit={(event) => {
          event.preventDefault();
          setAsked(correlationId.trim());
          focusFound.current = true;
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
      <div ref={found} tabIndex={-1} role="region" aria-label="Requests found" className="results">
        {lookup.error ? <Problem>{lookup.error.message}</Problem> : null}
        <div role="status">
          {lookup.data ? (
            lookup.data.records.length === 0 && lookup.data.attempts.length === 0 ? (
              <p className="empty">
                Nothing has the correlation id <code>{asked}</code>. {lookup.data.notFound?.text}
              </p>
            ) : (
              <>
                {lookup.data.records.map((record) => (
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
                      <dt>A retry now gets</dt>
                      <dd>{record.retryNow.text}</dd>
                    </dl>
                    <button type="button" className="link" onClick={() => onOpen(record)}>
                      Show this key and its principal
                    </button>
                  </article>
                ))}
                {lookup.data.attempts.map((attempt) => (
                  <article key={`${attempt.principalId} ${attempt.service} ${attempt.scope} ${attempt.key} ${attempt.at}`} aria-label={`Attempt ${attempt.correlationId}`}>
                    <dl>
                      <dt>Attempt</dt>
                      <dd>
                        {attemptLabels[attempt.outcome]}, status {attempt.status}, at {formatDateTime(attempt.at)}
                      </dd>
                      <dt>Principal</dt>
                      <dd>
                        {attempt.principalName ?? 'no name'} <code>{attempt.principalId}</code>
                      </dd>
                      <dt>Service and scope</dt>
                      <dd>
                        {attempt.service}, {attempt.scope}
                      </dd>
                      <dt>Idempotency key</dt>
                      <dd>
                        <code>{attempt.key}</code>
                      </dd>
                      <dt>The key now</dt>
                      <dd>
                        {attempt.record
                          ? `${stateLabels[attempt.record.state]}${attempt.record.statusCode === null ? '' : `, status ${attempt.record.statusCode}`}; a retry now gets ${attempt.record.retryNow.text}`
                          : 'no live key (the attempt was refused before one was created, or it expired)'}
                      </dd>
                    </dl>
                    <button type="button" className="link" onClick={() => onOpen(attempt)}>
                      Show this key and its principal
                    </button>
                  </article>
                ))}
              </>
            )
          ) : null}
          {lookup.data?.notKept?.map((entry) => (
            <p key={entry.service} className="muted">
              Requests of {entry.service}: {entry.reason}.
            </p>
          ))}
        </div>
      </div>
    </section>
  );
}
