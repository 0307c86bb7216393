'use client';
// The sign-in form: labelled fields, the error announced to screen readers, the button
// disabled while the attempt runs.
import { useActionState } from 'react';
import type { SignInState } from '@/app/login/actions';

interface Props {
  action: (previous: SignInState, form: FormData) => Promise<SignInState>;
  next: string;
}

export function LoginForm({ action, next }: Props) {
  const [state, submit, pending] = useActionState(action, { error: null, email: '' });
  return (
    <form action={submit} className="form" aria-describedby={state.error ? 'login-error' : undefined}>
      <input type="hidden" name="next" value={next} />
      <label htmlFor="email">Email</label>
      <input id="email" name="email" type="email" autoComplete="username" required autoFocus={!state.email} defaultValue={state.email} />
      <label htmlFor="password">Password</label>
      <input id="password" name="password" type="password" autoComplete="current-password" required autoFocus={Boolean(state.email)} />
      {state.error ? (
        <p id="login-error" role="alert" className="bad">
          {state.error}
        </p>
      ) : null}
      <button type="submit" disabled={pending}>
        {pending ? 'Signing in…' : 'Sign in'}
      </button>
    </form>
  );
}
