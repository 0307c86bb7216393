'use client';
// Finding a principal by display name: a case-insensitive prefix search (or a whole id), whose
// results fill the Principal ID of the lookup below. Names are not secret, so it is not audited;
// what is then looked up or listed is.
import { useMutation } from '@tanstack/react-query';
import { useState } from 'react';
import type { NamedPrincipal } from '@/server/metrics/principals';
import { adminFetch } from '../admin-fetch';
import { Problem } from '../banners';

export function PrincipalSearch({ onChoose }: { onChoose: (principalId: string) => void }) {
  const [name, setName] = useState('');
  const search = useMutation({
    mutationFn: (prefix: string) => adminFetch<{ principals: NamedPrincipal[] }>(`/api/admin/principals?${new URLSearchParams({ name: prefix }).toString()}`, { fieldLabels: { name: 'Principal name' } }),
  });
  return (
    <section className="card" aria-labelledby="principal-search-heading">
      <h2 id="principal-search-heading">Find a principal</h2>
      <form
        className="toolbar"
        onSubmit={(event) => {
          event.preventDefault();
          search.mutate(name.trim());
        }}
      >
        <label className="wide">
          Principal name
          <input name="principalName" required maxLength={200} autoComplete="off" placeholder="the start of a name, or an id" value={name} onChange={(event) => setName(event.target.value)} />
        </label>
        <button type="submit" disabled={search.isPending}>
          Find principals
        </button>
      </form>
      {search.error ? <Problem>{search.error.message}</Problem> : null}
      <div role="status">
        {search.data ? (
          search.data.principals.length === 0 ? (
            <p className="empty">No principal&apos;s name starts with that.</p>
          ) : (
            <ul>
              {search.data.principals.map((principal) => (
                <li key={principal.principalId}>
                  {principal.name ?? 'no name'} <code className="muted small">{principal.principalId}</code>{' '}
                  <button type="button" className="link" onClick={() => onChoose(principal.principalId)}>
                    Use {principal.name ?? principal.principalId}
                  </button>
                </li>
              ))}
            </ul>
          )
        ) : null}
      </div>
    </section>
  );
}
