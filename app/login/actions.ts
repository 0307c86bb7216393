'use server';
// Sign-in and sign-out as server actions: Next checks their Origin against the host (CSRF),
// and the session cookie is set or cleared through better-auth's nextCookies glue.
import { cookies, headers } from 'next/headers';
import { redirect } from 'next/navigation';
import { signInOperator, signOutOperator, type SignInResult } from '@/server/auth/operator-auth';
import { clientAddressOf } from '@/server/client-address';
import { DEVICE_COOKIE, DEVICE_COOKIE_SECONDS } from '@/server/auth/device-cookie';
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
  // An action is a public endpoint: arguments that are not the form's are refused, not a 500.
  if (!((form as unknown) instanceof FormData)) return { error: 'Enter your email and password.', email: '' };
  const email = form.get('email');
  const password = form.get('password');
  if (typeof email !== 'string' || typeof password !== 'string' || email.trim() === '' || password === '') {
    return { error: 'Enter your email and password.', email: typeof email === 'string' ? email : '' };
  }
  const requestHeaders = await headers();
  // The address the HTTP front resolved from the socket and TRUST_PROXY; never a client-written header.
  const result = await signInOperator(operatorAuth(), dashboardPool(), { email, password }, { headers: requestHeaders, address: clientAddressOf(requestHeaders) });
  if (!result.ok) return { email, error: refusalMessage(result) };
  // better-auth's nextCookies glue set the session cookie; the device cookie is ours.
  const line = result.setCookie.find((cookie) => cookie.startsWith(`${DEVICE_COOKIE}=`));
  const device = line?.split(';')[0]?.slice(DEVICE_COOKIE.length + 1);
  if (line && device) {
    (await cookies()).set(DEVICE_COOKIE, device, { path: '/', maxAge: DEVICE_COOKIE_SECONDS, httpOnly: true, sameSite: 'strict', secure: /;\s*Secure/i.test(line) });
  }
  redirect(safeNext(form.get('next')));
}

/** What the form says when a sign-in is refused; wrong password and unknown account read the same. */
function refusalMessage(result: Exclude<SignInResult, { ok: true }>): string {
  switch (result.reason) {
    case 'locked':
      return `Too many failed sign-ins. Try again in ${Math.ceil(result.retryAfterSeconds / 60)} minute(s).`;
    case 'busy':
      return `Too many sign-ins in progress. Try again in ${result.retryAfterSeconds} s.`;
    case 'invalid':
      return 'Wrong email or password, or the account is disabled.';
  }
}

export async function signOut(): Promise<void> {
  await signOutOperator(operatorAuth(), dashboardPool(), await headers());
  redirect('/login');
}
