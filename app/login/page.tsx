// /login: email and password. An operator who is already signed in goes straight on.
import { redirect } from 'next/navigation';
import { LoginForm } from '@/components/login-form';
import { currentOperator } from '@/app/_lib/dashboard';
import { signIn } from './actions';

export const dynamic = 'force-dynamic';

export default async function LoginPage({ searchParams }: { searchParams: Promise<Record<string, string | string[] | undefined>> }) {
  const { next } = await searchParams;
  if (await currentOperator()) redirect('/');
  return (
    <main id="content" tabIndex={-1} className="narrow">
      <h1>Sign in to Retrysafe</h1>
      <p className="muted">Operators only. Accounts are created by an admin.</p>
      <section className="card">
        <LoginForm action={signIn} next={typeof next === 'string' ? next : '/'} />
      </section>
    </main>
  );
}
