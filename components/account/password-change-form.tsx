'use client';
// The password change: the current password, the new one twice. The API checks the current one,
// ends every other session of yours (this one stays) and records the change in the audit log;
// field errors come back by their labels.
import { useMutation } from '@tanstack/react-query';
import { adminFetch } from '../admin-fetch';
import { Notice, Problem } from '../banners';
import { formText } from '../form-text';

const labels: Record<string, string> = { currentPassword: 'Current password', newPassword: 'New password', confirmation: 'Confirm new password' };

function changePassword(input: { currentPassword: string; newPassword: string; confirmation: string }): Promise<{ otherSessionsEnded: number }> {
  return adminFetch('/api/account/password', { method: 'POST', body: input, fieldLabels: labels });
}

export function PasswordChangeForm() {
  const changing = useMutation({ mutationFn: changePassword });
  const ended = changing.data?.otherSessionsEnded ?? 0;
  return (
    <form
      className="card form"
      aria-labelledby="password-change-title"
      onSubmit={(event) => {
        event.preventDefault();
        const form = event.currentTarget;
        const data = new FormData(form);
        changing.mutate(
          { currentPassword: formText(data, 'currentPassword'), newPassword: formText(data, 'newPassword'), confirmation: formText(data, 'confirmation') },
          { onSuccess: () => form.reset() },
        );
      }}
    >
      <h2 id="password-change-title">Change password</h2>
      <label htmlFor="current-password">Current password</label>
      <input id="current-password" name="currentPassword" type="password" required maxLength={1024} autoComplete="current-password" />
      <label htmlFor="new-password">New password</label>
      <input id="new-password" name="newPassword" type="password" required minLength={12} maxLength={128} autoComplete="new-password" aria-describedby="new-password-hint" />
      <p id="new-password-hint" className="muted small">
        At least 12 characters, at most 128. Every other session of yours is signed out; this one stays.
      </p>
      <label htmlFor="confirm-password">Confirm new password</label>
      <input id="confirm-password" name="confirmation" type="password" required minLength={12} maxLength={128} autoComplete="new-password" />
      {changing.error ? <Problem>{changing.error.message}</Problem> : null}
      {changing.data ? (
        <Notice>
          Password changed{ended > 0 ? `; ${ended} other ${ended === 1 ? 'session was' : 'sessions were'} signed out` : ''}. Recorded in the audit log.
        </Notice>
      ) : null}
      <button type="submit" disabled={changing.isPending}>
        {changing.isPending ? 'Changing…' : 'Change password'}
      </button>
    </form>
  );
}
