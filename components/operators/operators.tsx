'use client';
// Operators for admins: the list (your own row marked), a role change, disable/enable and a
// password reset per operator, each behind a confirmation that asks for the reason the audit
// log records, and the "New operator" form. A reset's generated password is shown once, in the
// dialog, and forgotten when it closes. The server refuses to leave no enabled admin; that refusal shows
// in the dialog as it is.
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useRouter } from 'next/navigation';
import { useRef, useState } from 'react';
import type { Operator } from '@/server/auth/operators';
import type { OperatorRole } from '@/server/auth/roles';
import { LocalTime } from '../local-time';
import { adminFetch } from '../admin-fetch';
import { DialogActions, useFocusReason } from '../dialog-actions';
import { queryKeys } from '../query-keys';
import { NewOperatorForm } from './new-operator-form';
import { roles, roleSummaries } from './roles';
import { Notice, Problem } from '../banners';
import { formText } from '../form-text';
import { Options } from '../options';

/** An operator as the API sends it (dates as strings). */
export type OperatorJson = Omit<Operator, 'createdAt'> & { createdAt: string };

type Change = { role: OperatorRole } | { disabled: boolean } | { resetPassword: true };

interface PendingChange {
  operator: OperatorJson;
  change: Change;
}

const fetchOperators = async () => (await adminFetch<{ operators: OperatorJson[] }>('/api/admin/operators')).operators;

interface IssuedPassword {
  email: string;
  password: string;
  sessionsEnded: number;
}

async function applyChange(input: PendingChange & { reason: string }): Promise<IssuedPassword | null> {
  const path = `/api/admin/operators/${encodeURIComponent(input.operator.id)}`;
  if ('resetPassword' in input.change) {
    return adminFetch<IssuedPassword>(`${path}/password`, { method: 'POST', body: { reason: input.reason }, fieldLabels: { reason: 'Reason' } });
  }
  await adminFetch<OperatorJson>(path, { method: 'PATCH', body: { ...input.change, reason: input.reason }, fieldLabels: { reason: 'Reason', role: 'Role' } });
  return null;
}

function describe({ operator, change }: PendingChange): { title: string; confirm: string; done: string } {
  if ('role' in change) {
    return { title: 'Change this role?', confirm: 'Change role', done: `${operator.email} is now ${change.role}.` };
  }
  if ('resetPassword' in change) {
    return { title: 'Reset this password?', confirm: 'Reset password', done: `Reset the password of ${operator.email}; their sessions have ended.` };
  }
  return change.disabled
    ? { title: 'Disable this operator?', confirm: 'Disable operator', done: `Disabled ${operator.email}; their sessions have ended.` }
    : { title: 'Enable this operator?', confirm: 'Enable operator', done: `Enabled ${operator.email}; they can sign in again.` };
}

export function Operators({ youId }: { youId: string }) {
  const client = useQueryClient();
  const router = useRouter();
  const operators = useQuery({ queryKey: queryKeys.operators(), queryFn: fetchOperators });
  // Role picked in a row's select but not saved yet, by operator id.
  const [drafts, setDrafts] = useState<Record<string, OperatorRole>>({});
  const [pending, setPending] = useState<PendingChange | null>(null);
  const [done, setDone] = useState<string | null>(null);
  // A reset's new password, shown in the dialog until it closes.
  const [issued, setIssued] = useState<IssuedPassword | null>(null);
  const dialog = useRef<HTMLDialogElement>(null);
  const changing = useMutation({
    mutationFn: applyChange,
    onSuccess: (password, input) => {
      setDone(`${describe(input).done} Recorded in the audit log with your reason.`);
      if (password) {
        setIssued(password);
        return;
      }
      setDrafts(({ [input.operator.id]: _saved, ...rest }) => rest);
      dialog.current?.close();
      void client.invalidateQueries({ queryKey: queryKeys.operators() });
      // Your own role or access changed: the server decides what you may still see.
      if (input.operator.id === youId) router.refresh();
    },
  });
  const open = (change: PendingChange) => {
    setPending(change);
    setIssued(null);
    setDone(null);
    changing.reset();
    dialog.current?.showModal();
  };
  useFocusReason(dialog, 'operator-change-reason', pending);
  const texts = pending ? describe(pending) : null;

  return (
    <>
      {done ? (
        <Notice>
          {done}
        </Notice>
      ) : null}
      {operators.error ? (
        <Problem>
          Could not load operators: {operators.error.message}
        </Problem>
      ) : null}
      {operators.data ? (
        <div className="card table-scroll">
          <table className="operators stack">
            <caption className="visually-hidden">Operators, by email</caption>
            <thead>
              <tr>
                <th scope="col">Email</th>
                <th scope="col">Name</th>
                <th scope="col">Role</th>
                <th scope="col">Status</th>
                <th scope="col">Created</th>
                <th scope="col">
                  <span className="visually-hidden">Access</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {operators.data.map((operator) => {
                const draft = drafts[operator.id] ?? operator.role;
                return (
                  <tr key={operator.id} className={operator.disabled ? 'disabled' : undefined}>
                    <td data-label="Email">
                      <span>
                        {operator.email}
                        {operator.id === youId ? <span className="muted"> (you)</span> : null}
                      </span>
                    </td>
                    <td data-label="Name">{operator.name}</td>
                    <td data-label="Role">
                      <div className="inline-form">
                        <select aria-label={`Role of ${operator.email}`} value={draft} onChange={(event) => setDrafts((all) => ({ ...all, [operator.id]: event.target.value as OperatorRole }))}>
                          <Options values={roles} />
                        </select>
                        <button type="button" className="link" disabled={draft === operator.role} aria-label={`Save role of ${operator.email}`} onClick={() => open({ operator, change: { role: draft } })}>
                          Save
                        </button>
                      </div>
                    </td>
                    <td className="nowrap" data-label="Status">
                      {operator.disabled ? <span className="bad">Disabled</span> : 'Active'}
                    </td>
                    <td className="nowrap" data-label="Created">
                      <LocalTime iso={operator.createdAt} />
                    </td>
                    <td data-label="Access">
                      <div className="inline-form">
                        <button
                          type="button"
                          className="link"
                          aria-label={`${operator.disabled ? 'Enable' : 'Disable'} ${operator.email}`}
                          onClick={() => open({ operator, change: { disabled: !operator.disabled } })}
                        >
                          {operator.disabled ? 'Enable' : 'Disable'}
                        </button>
                        {/* Your own password is changed on /account, with the current one. */}
                        {operator.id === youId ? null : (
                          <button type="button" className="link" aria-label={`Reset password of ${operator.email}`} onClick={() => open({ operator, change: { resetPassword: true } })}>
                            Reset password
                          </button>
                        )}
                      </div>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      ) : null}

      <NewOperatorForm
        onCreated={() => {
          setDone(null);
          void client.invalidateQueries({ queryKey: queryKeys.operators() });
        }}
      />

      <dialog ref={dialog} aria-labelledby="operator-change-title" className="card" onClose={() => setIssued(null)}>
        {issued ? (
          <div className="form">
            <h2 id="operator-change-title">New password for {issued.email}</h2>
            <p>
              <code className="secret">
                {issued.password}
              </code>
            </p>
            <p className="muted small">
              Shown this once: hand it over out of band. {issued.sessionsEnded > 0 ? 'Their sessions have ended; they' : 'They'} sign in with it at /login and can change it on their Account page.
            </p>
            <div className="actions">
              <button type="button" onClick={() => dialog.current?.close()}>
                Done
              </button>
            </div>
          </div>
        ) : (
          <form
            method="dialog"
            className="form"
            onSubmit={(event) => {
              event.preventDefault();
              if (!pending) return;
              changing.mutate({ ...pending, reason: formText(new FormData(event.currentTarget), 'reason') });
            }}
          >
            <h2 id="operator-change-title">{texts?.title}</h2>
            {pending ? <ChangeSummary pending={pending} yours={pending.operator.id === youId} /> : null}
            <label htmlFor="operator-change-reason">Reason</label>
            <input
              // A fresh, empty field for each change.
              key={pending ? `${pending.operator.id} ${JSON.stringify(pending.change)}` : 'none'}
              id="operator-change-reason"
              name="reason"
              required
              minLength={3}
              maxLength={500}
              placeholder="e.g. ticket 311: joined the on-call rota"
            />
            <DialogActions error={changing.error} pending={changing.isPending} confirm={texts?.confirm ?? 'Save'} pendingLabel="Saving…" onCancel={() => dialog.current?.close()} />
          </form>
        )}
      </dialog>
    </>
  );
}

function ChangeSummary({ pending: { operator, change }, yours }: { pending: PendingChange; yours: boolean }) {
  if ('role' in change) {
    return (
      <p>
        <strong>{operator.email}</strong> goes from {operator.role} to {change.role}: {roleSummaries[change.role].toLowerCase()}
        {yours && change.role !== 'admin' ? ' This is you: you lose access to this page.' : ''}
      </p>
    );
  }
  if ('resetPassword' in change) {
    return (
      <p>
        <strong>{operator.email}</strong> gets a new generated password, shown to you once, and every session they have ends now.
      </p>
    );
  }
  return change.disabled ? (
    <p>
      <strong>{operator.email}</strong> can no longer sign in, and every session they have ends now.
      {yours ? ' This is you: you will be signed out.' : ''}
    </p>
  ) : (
    <p>
      <strong>{operator.email}</strong> can sign in again with their password, as {operator.role}.
    </p>
  );
}
