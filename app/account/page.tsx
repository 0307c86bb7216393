// /account (every signed-in operator): who you are, and your password change, which asks for
// the current password and ends your other sessions (POST /api/account/password, audited).
import { requirePageOperator } from '@/app/_lib/dashboard';
import { PasswordChangeForm } from '@/components/account/password-change-form';

export const dynamic = 'force-dynamic';

export default async function AccountPage() {
  const you = await requirePageOperator('/account');
  return (
    <main id="content" tabIndex={-1} className="narrow">
      <h1>Your account</h1>
      <p className="muted">
        Signed in as {you.email} ({you.role}). Your role is changed by an admin.
      </p>
      <PasswordChangeForm />
    </main>
  );
}
