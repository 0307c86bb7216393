'use client';
// One principal's live keys, newest first, a page at a time, filtered by scope and state. Each
// page is audited with the operator's reason, so nothing refetches by itself. A page examines
// at most 2,000 keys, so when matches are rare it comes back short and says how far back it looked.
import { useMutation } from '@tanstack/react-query';
import { useEffect, useRef, useState } from 'react';
import type { MarkedKeyPage, KeySummary } from '@/server/idempotency/key-metadata';
import { adminFetch } from '../admin-fetch';
import { formatDateTime } from '../overview/format';
import { Options } from '../options';
import { Problem } from '../banners';

type State = KeySummary['state'];
export type KeyState = State;
type Page = MarkedKeyPage;
export interface ListRequest {
  principalId: string;
  reason: string;
  /** One service's keys only; empty: every service's. */
  service: string;
}

const stateLabels: Record<State, string> = { in_progress: 'in progress', completed: 'completed', failed: 'failed' };

interface Listing extends Omit<ListRequest, 'service'> {
  service?: string;
  scope?: string;
  state?: State;
}

export function PrincipalKeys({
  request,
  scopes,
  onLookUp,
  initialScope = '',
  initialState = '',
}: {
  request: ListRequest;
  scopes: string[];
  onLookUp: (key: { service: string; key: string }) => void;
  initialScope?: string;
  initialState?: State | '';
}) {
  const [state, setState] = useState<State | ''>(initialState);
  const [scope, setScope] = useState(initialScope);
  // The listed keys newest first, or those with the most conflicts and mismatches first.
  const [troubledFirst, setTroubledFirst] = useState(false);
  // What the pages on screen were listed with: later pages reuse it, whatever the form says now.
  const [listing, setListing] = useState<{ of: Listing; pages: Page[] } | null>(null);
  const list = useMutation({
    mutationFn: (input: { of: Listing; after: Page['next'] }) =>
      adminFetch<Page>('/api/admin/keys/list', {
        method: 'POST',
        body: { ...input.of, ...(input.after ? { after: input.after } : {}), limit: 50 },
        fieldLabels: { principalId: 'Principal ID', reason: 'Reason' },
      }),
    onSuccess: (page, input) => setListing((previous) => ({ of: input.of, pages: input.after && previous ? [...previous.pages, page] : [page] })),
  });
  // Where focus goes once a list request settles (its button is disabled meanwhile, so focus
  // would fall to <body>): the results for a first page, the first new row's button for a later one.
  const results = useRef<HTMLDivElement>(null);
  const focusNext = useRef<'results' | number | null>(null);
  useEffect(() => {
    const target = focusNext.current;
    if (target === null || list.isPending) return;
    focusNext.current = null;
    const button = typeof target === 'number' ? results.current?.querySelectorAll('tbody tr')[target]?.querySelector('button') : null;
    (button ?? results.current)?.focus();
  }, [listing, list.isPending]);
  const start = () => {
    focusNext.current = 'results';
    list.mutate({
      of: {
        principalId: request.principalId,
        reason: request.reason,
        ...(request.service === '' ? {} : { service: request.service }),
        ...(state === '' ? {} : { state }),
        ...(scope === '' ? {} : { scope }),
      },
      after: null,
    });
  };
  /** A filter changed: the pages on screen no longer answer it. */
  const clear = () => {
    focusNext.current = null;
    setListing(null);
    list.reset();
  };
  const pages = listing?.pages ?? [];
  const keys = pages.flatMap((page) => page.keys);
  const last = pages.at(-1);
  const next = last?.next ?? null;
  const searchedBackTo = last?.searchedBackTo ?? null;
  const listed = listing?.of;
  const filtered = `${listed?.service ? ` of ${listed.service}` : ''}${listed?.scope ? ` in ${listed.scope}` : ''}${listed?.state ? ` in state ${stateLabels[listed.state]}` : ''}`;
  let status = '';
  const counted = `${keys.length} live key${keys.length === 1 ? '' : 's'}${filtered}`;
  if (listing && !next) status = keys.length === 0 ? `No live key${filtered}.` : `All ${counted} shown; there is no older one.`;
  else if (searchedBackTo) status = `${keys.length === 0 ? `No live key${filtered} among` : `${counted} found among`} the keys created since ${formatDateTime(searchedBackTo)}; older keys may still match.`;
  else if (listing) status = `${counted} shown, newest first; older ones on the next page.`;
  // Services whose key backend did not answer (a list naming no service): said, not silently left out.
  const unavailable = [...new Set(pages.flatMap((page) => page.unavailable ?? []))];
  if (unavailable.length > 0) status += ` Not answered now, their keys are missing here: ${unavailable.join(', ')}.`;
  return (
    <section className="card" aria-labelledby="principal-keys-heading">
      <h2 id="principal-keys-heading">This principal&apos;s keys</h2>
      <div className="toolbar">
        <label>
          Scope
          <select
            value={scope}
            onChange={(event) => {
              setScope(event.target.value);
              clear();
            }}
          >
            <option value="">Any scope</option>
            <Options values={scope === '' || scopes.includes(scope) ? scopes : [...scopes, scope]} />
          </select>
        </label>
        <label>
          State
          <select
            value={state}
            onChange={(event) => {
              setState(event.target.value as State | '');
              clear();
            }}
          >
            <option value="">Any state</option>
            <Options values={Object.keys(stateLabels) as State[]} label={(value) => stateLabels[value]} />
          </select>
        </label>
        <button type="button" onClick={start} disabled={list.isPending || !request.principalId || request.reason.trim().length < 3}>
          List keys
        </button>
        <span className="muted small">Uses the Principal ID, Service and Reason above; each page is audited.</span>
      </div>
      <div ref={results} tabIndex={-1} role="region" aria-label="Listed keys" className="results">
        {list.error ? (
          <Problem>
            {list.error.message}
          </Problem>
        ) : null}
        {keys.length > 0 ? (
          <div className="table-scroll">
            <label className="small">
              <input type="checkbox" checked={troubledFirst} onChange={(event) => setTroubledFirst(event.target.checked)} /> Most conflicts and mismatches first
            </label>
            <table className="stack">
              <caption className="visually-hidden">Live keys of the principal, {troubledFirst ? 'most conflicts and mismatches first' : 'newest first'}</caption>
              <thead>
                <tr>
                  <th scope="col">Service</th>
                  <th scope="col">Scope</th>
                  <th scope="col">Key</th>
                  <th scope="col">State</th>
                  <th scope="col" className="num">
                    Status
                  </th>
                  <th scope="col" className="num">
                    Conflicts
                  </th>
                  <th scope="col" className="num">
                    Mismatches
                  </th>
                  <th scope="col">Created</th>
                  <th scope="col">Expires</th>
                  <th scope="col">
                    <span className="visually-hidden">Action</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {(troubledFirst ? [...keys].sort((a, b) => b.conflicts + b.mismatches - (a.conflicts + a.mismatches)) : keys).map((key) => (
                  <tr key={`${key.service} ${key.scope} ${key.key} ${key.expiresAt}`}>
                    <td className="nowrap" data-label="Service">
                      {key.service}
                    </td>
                    <td className="nowrap" data-label="Scope">
                      {key.scope}
                    </td>
                    <td className="key-cell" data-label="Key">
                      <code>{key.key}</code>
                    </td>
                    <td data-label="State">{stateLabels[key.state]}</td>
                    <td className="num" data-label="Status">
                      {key.statusCode ?? '—'}
                    </td>
                    <td className={key.conflicts > 0 ? 'num warn' : 'num'} data-label="Conflicts">
                      {key.conflicts}
                    </td>
                    <td className={key.mismatches > 0 ? 'num bad' : 'num'} data-label="Mismatches">
                      {key.mismatches}
                    </td>
                    <td className="nowrap" data-label="Created">
                      {formatDateTime(key.createdAt)}
                    </td>
                    <td className="nowrap" data-label="Expires">
                      {formatDateTime(key.expiresAt)}
                    </td>
                    <td className="nowrap row-actions">
                      <button type="button" className="link" onClick={() => onLookUp(key)} aria-label={`Look up ${key.key}`}>
                        Look up
                      </button>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        ) : null}
        {/* Always mounted, so a screen reader announces each change of what the list says. */}
        <p className={keys.length === 0 && listing ? 'empty' : 'muted small'} role="status">
          {status}
        </p>
        {next ? (
          <button
            type="button"
            className="link"
            onClick={() => {
              if (!listed) return;
              focusNext.current = keys.length;
              list.mutate({ of: listed, after: next });
            }}
            disabled={list.isPending}
          >
            {searchedBackTo ? 'Search older keys' : 'Next page'}
          </button>
        ) : null}
      </div>
    </section>
  );
}
