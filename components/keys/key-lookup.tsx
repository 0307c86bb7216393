'use client';
// Key lookup: one principal's key, every service's and scope's record (or one service's), metadata only. The reason is
// required and goes to the audit log with the lookup. A key under another principal and an
// absent key show the same "no record" answer, by design.
import { useMutation } from '@tanstack/react-query';
import { useEffect, useRef, useState } from 'react';
import type { TracedKeyRecord } from '@/server/idempotency/attempts';
import type { ServiceScope } from '@/server/retention/policies';
import { Options } from '../options';
import { adminFetch } from '../admin-fetch';
import { formatBytes, formatDateTime, formatDuration } from '../overview/format';
import { PrincipalKeys, type KeyState } from './principal-keys';
import { PrincipalSearch } from './principal-search';
import { CorrelationLookup } from './correlation-lookup';
import { UnrecordedCompletions } from './unrecorded-completions';
import { ReconcileFindings } from './reconcile-findings';
import { Problem } from '../banners';
import { LeasePassed } from './release-claim';

interface LookupInput {
  principalId: string;
  key: string;
  reason: string;
  /** One service's records only; empty: every service's. */
  service: string;
}

async function lookUp({ service, ...input }: LookupInput): Promise<TracedKeyRecord[]> {
  const body = service === '' ? input : { ...input, service };
  return (await adminFetch<{ records: TracedKeyRecord[] }>('/api/admin/keys/lookup', { method: 'POST', body, fieldLabels: labels })).records;
}

const labels: Record<string, string> = { principalId: 'Principal ID', service: 'Service', key: 'Idempotency key', reason: 'Reason' };
const stateLabels: Record<TracedKeyRecord['state'], string> = { in_progress: 'in progress', completed: 'completed', failed: 'failed (retryable)' };

export function KeyLookup({
  initialPrincipalId = '',
  initialKey = '',
  initialService = '',
  initialScope = '',
  initialState = '',
  scopes,
}: {
  initialPrincipalId?: string;
  initialKey?: string;
  initialService?: string;
  /** Filters of the principal's key list (links from the overview's principals table). */
  initialScope?: string;
  initialState?: KeyState | '';
  /** The (service, scope) pairs keys can live in, from the policies. */
  scopes: ServiceScope[];
}) {
  const [asked, setAsked] = useState<{ principalId: string; key: string; service: string } | null>(null);
  const lookup = useMutation({ mutationFn: lookUp });
  const [principalId, setPrincipalId] = useState(initialPrincipalId);
  const [service, setService] = useState(initialService);
  const [key, setKey] = useState(initialKey);
  const [reason, setReason] = useState('');
  const services = [...new Set(scopes.map((scope) => scope.service))];
  // Once a look-up settles, focus goes to its result (the form's button is disabled meanwhile,
  // so focus would otherwise fall to <body>), whichever control asked for it.
  const result = useRef<HTMLElement>(null);
  const focusResult = useRef(false);
  useEffect(() => {
    if (!focusResult.current || lookup.isPending) return;
    focusResult.current = false;
    result.current?.focus();
  }, [lookup.isPending, lookup.data, lookup.error]);
  const run = (input: LookupInput) => {
    focusResult.current = true;
    setAsked({ principalId: input.principalId, key: input.key, service: input.service });
    lookup.mutate(input);
    showInAddress(input);
  };
  return (
    <>
      <PrincipalSearch onChoose={setPrincipalId} />
      <form
        className="card form lookup"
        onSubmit={(event) => {
          event.preventDefault();
          run({ principalId: principalId.trim(), key, reason, service });
        }}
      >
        <label htmlFor="principalId">Principal ID</label>
        <input id="principalId" name="principalId" required placeholder="a tenant's UUID" autoComplete="off" spellCheck={false} value={principalId} onChange={(event) => setPrincipalId(event.target.value)} />
        <label htmlFor="service">Service</label>
        <select id="service" name="service" value={service} onChange={(event) => setService(event.target.value)}>
          <option value="">All services</option>
          <Options values={services.includes(service) || service === '' ? services : [...services, service]} />
        </select>
        <label htmlFor="key">Idempotency key</label>
        <input id="key" name="key" required maxLength={255} autoComplete="off" spellCheck={false} value={key} onChange={(event) => setKey(event.target.value)} />
        <label htmlFor="reason">Reason</label>
        <input id="reason" name="reason" required minLength={3} maxLength={500} placeholder="e.g. ticket 4211: customer reports a double charge" value={reason} onChange={(event) => setReason(event.target.value)} />
        <p className="muted small">Every lookup is recorded in the audit log with your reason. Response bodies are never shown.</p>
        <button type="submit" disabled={lookup.isPending}>
          {lookup.isPending ? 'Looking up…' : 'Look up'}
        </button>
      </form>
      <section ref={result} tabIndex={-1} aria-live="polite" aria-label="Lookup result" className="results">
        {lookup.error ? (
          <Problem>
            {lookup.error.message}
          </Problem>
        ) : null}
        {lookup.data && asked ? (
          lookup.data.length === 0 ? (
            <div className="card">
              <h2>No record</h2>
              <p>
                Principal <code>{asked.principalId}</code> has no live record of the key <code>{asked.key}</code> in any scope
                {asked.service === '' ? ' of any service' : ` of the service ${asked.service}`}. Either it was never used,
                it has expired, or it belongs to someone else.
              </p>
            </div>
          ) : (
            lookup.data.map((record) => (
              <RecordCard key={`${record.service} ${record.scope} ${record.expiresAt}`} record={record} principalId={asked.principalId} keyName={asked.key} onReleased={() => lookup.mutate({ ...asked, reason })} />
            ))
          )
        ) : null}
      </section>
      <CorrelationLookup
        reason={reason}
        onOpen={(record) => {
          setPrincipalId(record.principalId);
          setKey(record.key);
          setService(record.service);
          run({ principalId: record.principalId, key: record.key, reason, service: record.service });
        }}
      />
      <UnrecordedCompletions
        reason={reason}
        service={service}
        onOpen={(completion) => {
          setPrincipalId(completion.principalId);
          setKey(completion.key);
          setService(completion.service);
          run({ principalId: completion.principalId, key: completion.key, reason, service: completion.service });
        }}
      />
      <ReconcileFindings
        reason={reason}
        service={service}
        onOpen={(finding) => {
          setPrincipalId(finding.principalId);
          setKey(finding.key);
          setService(finding.service);
          run({ principalId: finding.principalId, key: finding.key, reason, service: finding.service });
        }}
      />
      <PrincipalKeys
        initialScope={initialScope}
        initialState={initialState}
        scopes={[...new Set(scopes.filter((scope) => service === '' || scope.service === service).map((scope) => scope.scope))]}
        request={{ principalId: principalId.trim(), reason, service }}
        onLookUp={(chosen) => {
          setKey(chosen.key);
          setService(chosen.service);
          run({ principalId: principalId.trim(), key: chosen.key, reason, service: chosen.service });
        }}
      />
    </>
  );
}

/**
 * The key looked up goes in the address (principal, key, service; never the reason), so the
 * link can be shared: it prefills the form, and whoever opens it still signs in and gives a
 * reason before the lookup runs. Replaced, not pushed: Back leaves the page as before.
 */
function showInAddress({ principalId, key, service }: LookupInput) {
  const params = new URLSearchParams(window.location.search);
  params.set('principalId', principalId);
  params.set('key', key);
  if (service === '') params.delete('service');
  else params.set('service', service);
  window.history.replaceState(window.history.state, '', `${window.location.pathname}?${params.toString()}`);
}

function RecordCard({ record, principalId, keyName, onReleased }: { record: TracedKeyRecord; principalId: string; keyName: string; onReleased: () => void }) {
  const leasePassed = record.leasePassedSeconds !== null;
  return (
    <article className="card" aria-label={`Record in ${record.scope} of ${record.service}`}>
      <h2>{record.scope}</h2>
      <dl>
        <dt>Service</dt>
        <dd>{record.service}</dd>
        <dt>State</dt>
        <dd>{stateLabels[record.state]}</dd>
        <dt>Status code</dt>
        <dd>{record.statusCode ?? '—'}</dd>
        <dt>Content type</dt>
        <dd>{record.contentType ?? '—'}</dd>
        <dt>Response size</dt>
        <dd>{record.responseSize === null ? '—' : formatBytes(record.responseSize)}</dd>
        <dt>Stored as</dt>
        <dd>{record.storedAs === 'body' ? 'encrypted body' : record.storedAs === 'reference' ? 'reference (replay re-derived)' : '—'}</dd>
        <dt>Correlation id</dt>
        <dd>
          <code>{record.correlationId}</code>
        </dd>
        <dt>Created</dt>
        <dd>{formatDateTime(record.createdAt)}</dd>
        <dt>Completed</dt>
        <dd>{formatDateTime(record.completedAt)}</dd>
        <dt>Expires</dt>
        <dd>
          {formatDateTime(record.expiresAt)} ({record.secondsLeft > 0 ? `${formatDuration(record.secondsLeft)} until it expires` : 'expired'})
        </dd>
        {record.state === 'in_progress' ? (
          <>
            <dt>{leasePassed ? 'Lease ended' : 'Lease ends'}</dt>
            <dd>
              {formatDateTime(record.leaseExpiresAt)}
              {leasePassed ? <span className="bad"> (passed)</span> : null}
            </dd>
          </>
        ) : null}
        <dt>Fingerprint prefix</dt>
        <dd>
          <code>{record.fingerprintPrefix}</code>
        </dd>
        <dt>Attempts</dt>
        <dd>{record.takeovers > 0 ? `${record.attempts} (${record.takeovers} takeover${record.takeovers > 1 ? 's' : ''} of a crashed attempt)` : record.attempts}</dd>
        <dt>A retry now gets</dt>
        <dd>{record.retryNow.text}</dd>
      </dl>
      <KeyTraceView record={record} />
      {leasePassed ? <LeasePassed record={record} principalId={principalId} keyName={keyName} onReleased={onReleased} /> : null}
    </article>
  );
}

const outcomeLabels: Record<TracedKeyRecord['lastAttempts'][number]['outcome'], string> = {
  replay: 'replay',
  conflict: 'conflict (in flight)',
  mismatch: 'mismatch (another body)',
  rejected: 'refused (quota)',
};

/** The key's counts of replays, conflicts, mismatches and quota refusals, and its last attempts. */
export function KeyTraceView({ record }: { record: Pick<TracedKeyRecord, 'counts' | 'lastAttempts' | 'scope'> }) {
  const { counts } = record;
  return (
    <>
      <h3>Retries of this key</h3>
      <dl>
        <dt>Replays</dt>
        <dd>{counts.replays}</dd>
        <dt>Conflicts (409)</dt>
        <dd className={counts.conflicts > 0 ? 'warn' : undefined}>{counts.conflicts}</dd>
        <dt>Mismatches (422)</dt>
        <dd className={counts.mismatches > 0 ? 'bad' : undefined}>{counts.mismatches}</dd>
        <dt>Quota refusals (429)</dt>
        <dd>{counts.quotaRefusals}</dd>
      </dl>
      {record.lastAttempts.length === 0 ? (
        <p className="muted small">No replay, conflict, mismatch or refusal recorded for this key.</p>
      ) : (
        <table aria-label={`Last attempts in ${record.scope}`}>
          <thead>
            <tr>
              <th scope="col">Time</th>
              <th scope="col">Outcome</th>
              <th scope="col">Status</th>
              <th scope="col">Correlation id</th>
            </tr>
          </thead>
          <tbody>
            {record.lastAttempts.map((attempt) => (
              <tr key={`${attempt.at} ${attempt.correlationId}`}>
                <td>{formatDateTime(attempt.at)}</td>
                <td>{outcomeLabels[attempt.outcome]}</td>
                <td>{attempt.status}</td>
                <td>
                  <code>{attempt.correlationId}</code>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}
