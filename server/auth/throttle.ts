// Sign-in throttling, cluster-wide (a row per subject in sign_in_throttle): failures are
// counted per account and per client address within a window; past the limit the subject
// is locked for a while, and a success clears the account's count. Primary-key upserts.
import type { Queryable } from '@retrysafe/store/postgres';

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

/**
 * Counts this attempt against each subject before the password is checked, in one upsert, so
 * parallel attempts cannot all pass a check made before any of them was counted. The attempt
 * that reaches a subject's limit locks it (and is still checked); any attempt past the limit,
 * or while an earlier lock holds, is refused. Returns the seconds until the last lock ends
 * when refused, else 0.
 */
export async function reserveAttempt(db: Queryable, email: string, address: string | null, limits: ThrottleLimits = defaultThrottleLimits): Promise<number> {
  const { rows } = await db.query<{ refused: boolean; seconds: number | null }>({
    name: 'auth_throttle_reserve',
    text: `WITH counted AS (
             INSERT INTO sign_in_throttle AS t (subject, failures, window_started_at, locked_until)
             SELECT subject, 1, now(), CASE WHEN 1 >= CASE WHEN subject LIKE 'email:%' THEN $3::int ELSE $4::int END THEN now() + $5::int * interval '1 second' END
             FROM unnest($1::text[]) AS subject
             ON CONFLICT (subject) DO UPDATE SET
               failures = CASE WHEN t.window_started_at < now() - $2::int * interval '1 second' THEN 1 ELSE t.failures + 1 END,
               window_started_at = CASE WHEN t.window_started_at < now() - $2::int * interval '1 second' THEN now() ELSE t.window_started_at END,
               locked_until = CASE
                 WHEN t.locked_until > now() THEN t.locked_until
                 WHEN (CASE WHEN t.window_started_at < now() - $2::int * interval '1 second' THEN 1 ELSE t.failures + 1 END)
                      >= CASE WHEN t.subject LIKE 'email:%' THEN $3::int ELSE $4::int END THEN now() + $5::int * interval '1 second'
               END
             RETURNING subject, failures, locked_until
           )
           SELECT coalesce(bool_or(
                    failures > CASE WHEN subject LIKE 'email:%' THEN $3::int ELSE $4::int END
                    OR (locked_until > now() AND locked_until <> now() + $5::int * interval '1 second')), false) AS refused,
                  ceil(extract(epoch FROM max(locked_until) - now()))::int AS seconds
           FROM counted`,
    values: [subjects(email, address).sort(), limits.windowSeconds, limits.accountFailures, limits.addressFailures, limits.lockSeconds],
  });
  const row = rows[0];
  return row?.refused ? Math.max(1, row.seconds ?? limits.lockSeconds) : 0;
}

/** A successful sign-in: the account's count and lock go, and the attempt no longer counts against the address. */
export async function recordSuccess(db: Queryable, email: string, address: string | null): Promise<void> {
  await db.query({
    name: 'auth_throttle_success',
    text: `WITH account AS (DELETE FROM sign_in_throttle WHERE subject = $1)
           UPDATE sign_in_throttle SET failures = greatest(failures - 1, 0) WHERE subject = $2`,
    values: [`email:${email.toLowerCase()}`, address ? `ip:${address}` : null],
  });
}

/**
 * Deletes rows that no longer count: their window ended and no lock holds. Without this, every
 * address or email ever tried keeps a row (a client can vary its forwarded address at will).
 * Bounded per call; run every few minutes by the server's housekeeping. Returns rows deleted.
 */
export async function pruneThrottle(db: Queryable, limits: ThrottleLimits = defaultThrottleLimits, batch = 10_000): Promise<number> {
  const { rowCount } = await db.query({
    name: 'auth_throttle_prune',
    text: `DELETE FROM sign_in_throttle WHERE subject IN (
             SELECT subject FROM sign_in_throttle
             WHERE window_started_at < now() - $1::int * interval '1 second' AND (locked_until IS NULL OR locked_until < now())
             LIMIT $2)`,
    values: [limits.windowSeconds, batch],
  });
  return rowCount ?? 0;
}
