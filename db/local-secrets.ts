// Embedded mode generates the store's secrets once and keeps them under .data/
// (mode 0600), so fingerprints and stored responses survive restarts. Outside
// embedded mode they must come from the environment.
import { randomBytes } from 'node:crypto';
import { readFile, writeFile, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { withFileLock } from './file-lock';

const secretsFile = z.object({ idempotencySecret: z.string().min(32), responseEncryptionKeys: z.string().min(1) });
export type LocalSecrets = z.infer<typeof secretsFile>;

export async function loadOrCreateLocalSecrets(dataDir: string): Promise<LocalSecrets> {
  const path = join(dataDir, 'secrets.json');
  await mkdir(dataDir, { recursive: true });
  return withFileLock(join(dataDir, 'secrets'), async () => {
    const existing = await readFile(path, 'utf8').catch(() => undefined);
    if (existing !== undefined) return secretsFile.parse(JSON.parse(existing));
    const created: LocalSecrets = {
      idempotencySecret: randomBytes(32).toString('base64url'),
      responseEncryptionKeys: `k1:${randomBytes(32).toString('base64')}`,
    };
    await writeFile(path, JSON.stringify(created), { mode: 0o600 });
    return created;
  });
}
