'use client';
// The "New operator" form: email, a first password, a role and an optional name. The API
// hashes the password and audits the creation; field errors come back by their labels.
import { useMutation } from '@tanstack/react-query';
import { useState } from 'react';
import type { OperatorRole } from '@/server/auth/roles';
import { adminFetch } from '../admin-fetch';
import type { OperatorJson } from './operators';
import { roles, roleSummaries } from './roles';
import { Notice, Problem } from '../banners';
import { formText } from '../form-text';
import { Options } from '../options';

const labels: Record<string, string> = { email: 'Email', password: 'Password', role: 'Role', name: 'Name' };

function createOperator(input: { email: string; password: string; role: OperatorRole; name?: string }): Promise<OperatorJson> {
  return adminFetch<OperatorJson>('/api/admin/operators', { method: 'POST', body: input, fieldLabels: labels });
}

export function NewOperatorForm({ onCreated }: { onCreated: (operator: OperatorJson) => void }) {
  const [role, setRole] = useState<OperatorRole>('viewer');
  const creating = useMutation({ mutationFn: createOperator });
  return (
    <form
      className="card form new-operator"
      aria-labelledby="new-operator-title"
      // Starting the next one clears the last confirmation.
      onFocus={() => {
        if (creating.data) creating.reset();
      }}
      onSubmit={(event) => {
        event.preventDefault();
        const form = event.currentTarget;
        const data = new FormData(form);
        const name = formText(data, 'name').trim();
        creating.mutate(
          { email: formText(data, 'email').trim(), password: formText(data, 'password'), role, ...(name ? { name } : {}) },
          {
            onSuccess: (operator) => {
              form.reset();
              setRole('viewer');
              onCreated(operator);
            },
          },
        );
      }}
    >
      <h2 id="new-operator-title">New operator</h2>
      <label htmlFor="new-operator-email">Email</label>
      <input id="new-operator-email" name="email" type="email" required maxLength={254} autoComplete="off" spellCheck={false} />
      <label htmlFor="new-operator-password">Password</label>
      <input id="new-operator-password" name="password" type="password" required minLength={12} maxLength={128} autoComplete="new-password" aria-describedby="new-operator-password-hint" />
      <p id="new-operator-password-hint" className="muted small">
        At least 12 characters. Hand it over out of band; they sign in with it at /login.
      </p>
      <label htmlFor="new-operator-role">Role</label>
      <select id="new-operator-role" name="role" value={role} onChange={(event) => setRole(event.target.value as OperatorRole)} aria-describedby="new-operator-role-hint">
        <Options values={roles} />
      </select>
      <p id="new-operator-role-hint" className="muted small">
        {roleSummaries[role]}
      </p>
      <label htmlFor="new-operator-name">
        Name <span className="muted small">(optional)</span>
      </label>
      <input id="new-operator-name" name="name" maxLength={200} autoComplete="off" />
      {creating.error ? (
        <Problem>
          {creating.error.message}
        </Problem>
      ) : null}
      {/* Here rather than at the top of the page, where it would be out of sight. */}
      {creating.data ? (
        <Notice>
          Created {creating.data.email} as {creating.data.role}. Recorded in the audit log.
        </Notice>
      ) : null}
      <button type="submit" disabled={creating.isPending}>
        {creating.isPending ? 'Creating…' : 'Create operator'}
      </button>
    </form>
  );
}
