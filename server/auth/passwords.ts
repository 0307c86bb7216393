// Operator passwords: argon2id (OWASP's minimum: 19 MiB, 2 passes, 1 lane), as PHC strings.
// Used by better-auth at sign-in and by operator creation, so both agree on the format.
import { hash, verify } from '@node-rs/argon2';
import { z } from 'zod';

const ARGON2ID = { memoryCost: 19_456, timeCost: 2, parallelism: 1 };

export const passwordSchema = z.string().min(12, 'must be at least 12 characters').max(128, 'must be at most 128 characters');

export function hashPassword(password: string): Promise<string> {
  return hash(password, ARGON2ID);
}

export function verifyPassword(data: { hash: string; password: string }): Promise<boolean> {
  return verify(data.hash, data.password).catch(() => false);
}
