// Operators of every role, signed in against a test database: the cookie header each would
// send. The operators are created as the owner (as the CLI does); sessions are made through the
// product's own sign-in on the dashboard's role (with the server's AUTH_SECRET), so the started
// server accepts them.
import pg from 'pg';
import { createOperatorAuth, signInOperator } from '../../server/auth/operator-auth';
import { createOperator } from '../../server/auth/operators';
import { operatorRoles, type OperatorRole } from '../../server/auth/roles';
import { testSecrets } from './server';
import { authPoolFor } from './database';

export const OPERATOR_PASSWORD = 'a long test password';

export async function signInEveryRole(db: { url: string; dashboardUrl: string }, baseUrl: string, domain = 'roles.example'): Promise<Map<OperatorRole, string>> {
  const owner = new pg.Pool({ connectionString: db.url, max: 1 });
  const dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 2 });
  const signIn = authPoolFor(db.url, 2);
  const auth = createOperatorAuth({ pool: signIn, secret: testSecrets.AUTH_SECRET, baseURL: baseUrl, signInHashesPerSecond: 1_000 });
  const cookies = new Map<OperatorRole, string>();
  try {
    for (const role of operatorRoles) {
      const email = `${role}@${domain}`;
      await createOperator(owner, { email, password: OPERATOR_PASSWORD, role }, { system: 'test' });
      const signedIn = await signInOperator(auth, dashboard, { email, password: OPERATOR_PASSWORD }, { headers: new Headers(), address: null });
      if (!signedIn.ok) throw new Error(`could not sign in as ${role}`);
      cookies.set(role, signedIn.setCookie.map((line) => line.split(';')[0]).join('; '));
    }
  } finally {
    await owner.end();
    await dashboard.end();
    await signIn.end();
  }
  return cookies;
}
