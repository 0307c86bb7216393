// The first admin: created on start when no operator exists, from ADMIN_EMAIL and
// ADMIN_PASSWORD, else with a generated password that is shown once (never logged again).
import { randomBytes } from 'node:crypto';
import type { Queryable } from '@retrysafe/store/postgres';
import { countOperators, createOperator } from './operators';

export const DEFAULT_ADMIN_EMAIL = 'admin@retrysafe.local';

export type FirstAdmin =
  | { created: true; email: string; generatedPassword: string | null }
  | { created: false; email: string | null };

export async function ensureFirstAdmin(pool: Queryable, configured: { email?: string; password?: string }): Promise<FirstAdmin> {
  if ((await countOperators(pool)) === 0) {
    const email = (configured.email ?? DEFAULT_ADMIN_EMAIL).toLowerCase();
    const generatedPassword = configured.password ? null : randomBytes(12).toString('base64url');
    try {
      await createOperator(pool, { email, password: configured.password ?? generatedPassword ?? '', role: 'admin', name: 'Admin' }, { system: 'system' });
      return { created: true, email, generatedPassword };
    } catch (error) {
      // Another instance starting at the same moment created one first.
      if ((error as { code?: string }).code !== 'OPERATOR_EXISTS') throw error;
    }
  }
  const { rows } = await pool.query<{ email: string }>("SELECT email FROM operators WHERE role = 'admin' AND NOT banned ORDER BY created_at LIMIT 1");
  return { created: false, email: rows[0]?.email ?? null };
}

/**
 * How the start's last line tells an operator to sign in. Without an enabled admin it names the
 * CLI with the password on stdin (or its prompt), never `--password P`, which would leave the
 * password in the shell history and the process list.
 */
export function signInWords(admin: FirstAdmin): string {
  if (!admin.email) return 'no admin is enabled: create one with printf "%s\\n" "$PASSWORD" | npm run cli -- user create --email E --role admin (or type the password at its prompt)';
  if (admin.created && admin.generatedPassword) return `sign in as ${admin.email} with password ${admin.generatedPassword} (shown once: keep it)`;
  if (admin.created) return `sign in as ${admin.email} with ADMIN_PASSWORD`;
  return `sign in as ${admin.email} (password printed on the first start; npm run cli -- user create adds operators)`;
}
