// The start's last line: how to sign in, never with a password on a command line.
import { describe, expect, it } from 'vitest';
import { signInWords } from '../../server/auth/bootstrap';

describe('the start line on signing in', () => {
  it('without an enabled admin, names the CLI with the password on stdin, not --password (shell history, process list)', () => {
    const words = signInWords({ created: false, email: null });
    expect(words).toContain('printf "%s\\n" "$PASSWORD" | npm run cli -- user create --email E --role admin');
    expect(words).not.toContain('--password');
  });

  it('shows a generated password once, and otherwise names where the password is', () => {
    expect(signInWords({ created: true, email: 'a@example.test', generatedPassword: 'p4ss' })).toBe('sign in as a@example.test with password p4ss (shown once: keep it)');
    expect(signInWords({ created: true, email: 'a@example.test', generatedPassword: null })).toBe('sign in as a@example.test with ADMIN_PASSWORD');
    expect(signInWords({ created: false, email: 'a@example.test' })).toContain('password printed on the first start');
  });
});
