// Sign-in throttling, cluster-wide (a row per subject in sign_in_throttle): failures are
// counted per account and per client address within a window; past the limit the subject
// is locked for a while, and a success clears the account's count. Primary-key upserts.
import type { Queryable } from '../idempotency/statements';

export interface ThrottleLimits {
  /** Failures of one account within the window before it is locked. */
  accountFailures: number;
  /** Failures from one address within the window (across accounts) before it is locked. */
  addressFailures: number;
  windowSeconds: number;
  lockSeconds: number;
}

export const defaultThrottleLimits: ThrottleLimits = { accountFailures: 5, addressFailures: 20, windowSeconds: 900, lockSeconds: 900 };

export const subjects = (email: string, address: string | null) => [`email:${email.toLowerCase()}`, ...(address ? [`ip:${address}`] : [])];

/** Seconds until the first of these subjects is unlocked, or 0 when none is locked. */
export async function lockedForSeconds(db: Queryable, keys: string[]): Promise<number> {
  const { rows } = await db.query<{ seconds: number | null }>({
    name: 'auth_throttle_locked',
    text: `SELECT ceil(extract(epoch FROM max(locked_until) - now()))::int AS seconds FROM sign_in_throttle
           WHERE subject = ANY($1::text[]) AND locked_until > now()`,
    values: [keys],
  });
  return Math.max(0, rows[0]?.seconds ?? 0);
}

/** Counts a failure for each subject (a new window once the old one passed); locks those over their limit. */
export async function recordFailure(db: Queryable, email: string, address: string | null, limits: ThrottleLimits = defaultThrottleLimits): Promise<void> {
  const keys = subjects(email, address);
  await db.query({
    name: 'auth_throttle_failure',
    text: `INSERT INTO sign_in_throttle AS t (subject, failures, window_started_at)
           SELECT subject, 1, now() FROM unnest($1::text[]) AS subject
           ON CONFLICT (subject) DO UPDATE SET
             failures = CASE WHEN t.window_started_at < now() - $2::int * interval '1 second' THEN 1 ELSE t.failures + 1 END,
             window_started_at = CASE WHEN t.window_started_at < now() - $2::int * interval '1 second' THEN now() ELSE t.window_started_at END,
             locked_until = CASE
               WHEN t.window_started_at >= now() - $2::int * interval '1 second'
                AND t.failures + 1 >= CASE WHEN t.subject LIKE 'email:%' THEN $3::int ELSE $4::int END
               THEN now() + $5::int * interval '1 second'
               ELSE t.locked_until END`,
    values: [keys.sort(), limits.windowSeconds, limits.accountFailures, limits.addressFailures, limits.lockSeconds],
  });
}

/** A successful sign-in clears the account's failures (not the address's). */
export async function clearAccountFailures(db: Queryable, email: string): Promise<void> {
  await db.query({ name: 'auth_throttle_clear', text: 'DELETE FROM sign_in_throttle WHERE subject = $1', values: [`email:${email.toLowerCase()}`] });
}
