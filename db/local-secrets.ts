// Embedded mode generates its secrets once (the store's keys, the dashboard role's password,
// the session secret) and keeps them under .data/ (mode 0600), so fingerprints, stored
// responses and sessions survive restarts. Outside embedded mode they come from the environment.
import { randomBytes } from 'node:crypto';
import { readFile, writeFile, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { withFileLock } from './file-lock';

const secretsFile = z.object({
  idempotencySecret: z.string().min(32),
  responseEncryptionKeys: z.string().min(1),
  // Added later: generated on the first start that lacks them.
  dashboardPassword: z.string().min(24).optional(),
  authSecret: z.string().min(32).optional(),
});
export type LocalSecrets = Required<z.infer<typeof secretsFile>>;

export async function loadOrCreateLocalSecrets(dataDir: string): Promise<LocalSecrets> {
  const path = join(dataDir, 'secrets.json');
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  return withFileLock(join(dataDir, 'secrets'), async () => {
    const existing = await readFile(path, 'utf8').catch(() => undefined);
    const saved = existing === undefined ? undefined : secretsFile.parse(JSON.parse(existing));
    const secrets: LocalSecrets = {
      idempotencySecret: saved?.idempotencySecret ?? randomBytes(32).toString('base64url'),
      responseEncryptionKeys: saved?.responseEncryptionKeys ?? `k1:${randomBytes(32).toString('base64')}`,
      dashboardPassword: saved?.dashboardPassword ?? randomBytes(24).toString('base64url'),
      authSecret: saved?.authSecret ?? randomBytes(32).toString('base64url'),
    };
    if (!saved?.dashboardPassword || !saved.authSecret) await writeFile(path, JSON.stringify(secrets), { mode: 0o600 });
    return secrets;
  });
}
