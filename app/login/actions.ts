'use server';
// Sign-in and sign-out as server actions: Next checks their Origin against the host (CSRF),
// and the session cookie is set or cleared through better-auth's nextCookies glue.
import { headers } from 'next/headers';
import { redirect } from 'next/navigation';
import { signInOperator, signOutOperator } from '@/server/auth/operator-auth';
import { dashboardPool, operatorAuth } from '@/app/_lib/dashboard';
import { routeAccess } from '@/app/_lib/access';

export interface SignInState {
  error: string | null;
  /** Kept so a failed attempt does not clear the email field. */
  email: string;
}

/** Only a page of this dashboard, never another site (open redirect). */
function safeNext(value: FormDataEntryValue | null): string {
  const next = typeof value === 'string' ? value : '/';
  return Object.hasOwn(routeAccess, next) && next !== '/login' && !next.startsWith('/api/') ? next : '/';
}

export async function signIn(_previous: SignInState, form: FormData): Promise<SignInState> {
  const email = form.get('email');
  const password = form.get('password');
  if (typeof email !== 'string' || typeof password !== 'string' || email.trim() === '' || password === '') {
    return { error: 'Enter your email and password.', email: typeof email === 'string' ? email : '' };
  }
  const requestHeaders = await headers();
  // The first hop a proxy recorded, when there is one; the throttle also counts per account.
  const address = requestHeaders.get('x-forwarded-for')?.split(',')[0]?.trim() || null;
  const result = await signInOperator(operatorAuth(), dashboardPool(), { email, password }, { headers: requestHeaders, address });
  if (!result.ok) {
    return {
      email,
      error:
        result.reason === 'locked'
          ? `Too many failed sign-ins. Try again in ${Math.ceil(result.retryAfterSeconds / 60)} minute(s).`
          : 'Wrong email or password, or the account is disabled.',
    };
  }
  redirect(safeNext(form.get('next')));
}

export async function signOut(): Promise<void> {
  await signOutOperator(operatorAuth(), dashboardPool(), await headers());
  redirect('/login');
}
