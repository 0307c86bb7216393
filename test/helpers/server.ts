// Starts the product the way a user does (`npm start`'s script: build if stale,
// migrate, serve) against a test database on a free port, and stops it afterwards.
import { randomBytes } from 'node:crypto';
import { spawnStart, type RunningServer } from '../../scripts/spawn-start';
import { dashboardUrlFor } from './database';

/** One set per test process, so several servers on one database agree on fingerprints, keys and sessions. */
export const testSecrets = {
  IDEMPOTENCY_SECRET: randomBytes(32).toString('base64url'),
  RESPONSE_ENCRYPTION_KEYS: `t1:${randomBytes(32).toString('base64')}`,
  AUTH_SECRET: randomBytes(32).toString('base64url'),
};

/** The first admin every test server bootstraps. */
export const testAdmin = { email: 'admin@test.example', password: randomBytes(12).toString('base64url') };

export type { RunningServer };

export function startServer(databaseUrl: string, extraEnv: Record<string, string> = {}): Promise<RunningServer> {
  return spawnStart({
    DATABASE_URL: databaseUrl,
    IDEMPOTENCY_SECRET: testSecrets.IDEMPOTENCY_SECRET,
    RESPONSE_ENCRYPTION_KEYS: testSecrets.RESPONSE_ENCRYPTION_KEYS,
    AUTH_SECRET: testSecrets.AUTH_SECRET,
    DASHBOARD_DATABASE_URL: dashboardUrlFor(databaseUrl),
    ADMIN_EMAIL: testAdmin.email,
    ADMIN_PASSWORD: testAdmin.password,
    ...extraEnv,
  });
}
