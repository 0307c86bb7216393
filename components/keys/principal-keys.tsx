'use client';
// One principal's live keys, a page at a time in (scope, key) order, filtered by state. Each
// page is audited with the operator's reason, so nothing refetches by itself.
import { useMutation } from '@tanstack/react-query';
import { useState } from 'react';
import type { KeySummary } from '@/server/idempotency/key-metadata';
import { adminFetch } from '../admin-fetch';
import { formatDateTime } from '../overview/format';
import { Problem } from '../banners';

type State = KeySummary['state'];
interface Page {
  keys: KeySummary[];
  next: { scope: string; key: string } | null;
}
export interface ListRequest {
  principalId: string;
  reason: string;
}

const stateLabels: Record<State, string> = { in_progress: 'in progress', completed: 'completed', failed: 'failed' };

export function PrincipalKeys({ request, scopes, onLookUp }: { request: ListRequest; scopes: string[]; onLookUp: (key: string) => void }) {
  const [state, setState] = useState<State | ''>('');
  const [scope, setScope] = useState('');
  const [pages, setPages] = useState<Page[]>([]);
  const list = useMutation({
    mutationFn: (input: { after: Page['next'] }) =>
      adminFetch<Page>('/api/admin/keys/list', {
        method: 'POST',
        body: { ...request, ...(state === '' ? {} : { state }), ...(scope === '' ? {} : { scope }), ...(input.after ? { after: input.after } : {}), limit: 50 },
        fieldLabels: { principalId: 'Principal ID', reason: 'Reason' },
      }),
    onSuccess: (page, input) => setPages((previous) => (input.after ? [...previous, page] : [page])),
  });
  const keys = pages.flatMap((page) => page.keys);
  const next = pages.at(-1)?.next ?? null;
  return (
    <section className="card" aria-labelledby="principal-keys-heading">
      <h2 id="principal-keys-heading">This principal&apos;s keys</h2>
      <div className="toolbar">
        <label>
          Scope
          <select value={scope} onChange={(event) => setScope(event.target.value)}>
            <option value="">Any scope</option>
            {scopes.map((value) => (
              <option key={value} value={value}>
                {value}
              </option>
            ))}
          </select>
        </label>
        <label>
          State
          <select value={state} onChange={(event) => setState(event.target.value as State | '')}>
            <option value="">Any state</option>
            {(Object.keys(stateLabels) as State[]).map((value) => (
              <option key={value} value={value}>
                {stateLabels[value]}
              </option>
            ))}
          </select>
        </label>
        <button type="button" onClick={() => list.mutate({ after: null })} disabled={list.isPending || !request.principalId || request.reason.trim().length < 3}>
          List keys
        </button>
        <span className="muted small">Uses the Principal ID and Reason above; each page is audited.</span>
      </div>
      {list.error ? (
        <Problem>
          {list.error.message}
        </Problem>
      ) : null}
      {pages.length > 0 && keys.length === 0 ? <p className="empty">
          No live key{scope ? ` in ${scope}` : ''}
          {state ? ` in state ${stateLabels[state]}` : ''}.
        </p> : null}
      {keys.length > 0 ? (
        <div className="table-scroll">
          <table>
            <caption className="visually-hidden">Live keys of the principal, by scope and key</caption>
            <thead>
              <tr>
                <th scope="col">Scope</th>
                <th scope="col">Key</th>
                <th scope="col">State</th>
                <th scope="col" className="num">
                  Status
                </th>
                <th scope="col">Created</th>
                <th scope="col">Expires</th>
                <th scope="col">
                  <span className="visually-hidden">Action</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {keys.map((key) => (
                <tr key={`${key.scope} ${key.key} ${key.expiresAt}`}>
                  <td className="nowrap">{key.scope}</td>
                  <td className="key-cell">
                    <code>{key.key}</code>
                  </td>
                  <td>{stateLabels[key.state]}</td>
                  <td className="num">{key.statusCode ?? '—'}</td>
                  <td className="nowrap">{formatDateTime(key.createdAt)}</td>
                  <td className="nowrap">{formatDateTime(key.expiresAt)}</td>
                  <td className="nowrap">
                    <button type="button" className="link" onClick={() => onLookUp(key.key)} aria-label={`Look up ${key.key}`}>
                      Look up
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
      {next ? (
        <button type="button" className="link" onClick={() => list.mutate({ after: next })} disabled={list.isPending}>
          Next page
        </button>
      ) : null}
    </section>
  );
}
