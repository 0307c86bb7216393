// Sign-in throttling, cluster-wide (a row per subject in sign_in_throttle): attempts from an
// unknown device count per account and per known client address within a window, attempts
// from a known device (device cookie) per device; past the limit the subject is locked for a
// while, and a success clears its count. Primary-key upserts.
import type { Queryable } from '@retrysafe/store/postgres';

export interface ThrottleLimits {
  /** Failures of one account from unknown devices within the window before it is locked (for unknown devices). */
  accountFailures: number;
  /** Failures from one known client address (across accounts, unknown devices) within the window before it is locked. */
  addressFailures: number;
  /** Failures from one known device (a valid device cookie) within the window before that device is locked. */
  deviceFailures?: number;
  windowSeconds: number;
  lockSeconds: number;
}

export const defaultThrottleLimits: ThrottleLimits = { accountFailures: 5, addressFailures: 20, deviceFailures: 5, windowSeconds: 900, lockSeconds: 900 };

/** Who an attempt comes from: the account, and either the device it proved (device cookie) or the client address when known. */
export interface AttemptSource {
  email: string;
  /** The client address, when the HTTP front could know it (TRUST_PROXY); null when unknown. */
  address: string | null;
  /** The device id of a valid device cookie for this account; null for an unknown device. */
  device: string | null;
}

/**
 * The subjects an attempt counts against, each with its limit. A known device is throttled
 * on its own only: a stranger cannot lock it out through the account or a shared address.
 * An unknown device counts against the account and, when the address is known, the address.
 */
export function subjectsOf(source: AttemptSource, limits: ThrottleLimits = defaultThrottleLimits): { subject: string; limit: number }[] {
  if (source.device) return [{ subject: `device:${source.device}`, limit: limits.deviceFailures ?? limits.accountFailures }];
  return [
    { subject: `email:${source.email.toLowerCase()}`, limit: limits.accountFailures },
    ...(source.address ? [{ subject: `ip:${source.address}`, limit: limits.addressFailures }] : []),
  ];
}

export interface Reservation {
  /** Seconds until the last lock that refuses this attempt ends; 0 when it may go on. */
  refusedSeconds: number;
  /** Subjects this very attempt locked (it reached their limit); each is audited once as a lockout. */
  lockedNow: string[];
}

/**
 * Counts this attempt against each subject before the password is checked, in one upsert, so
 * parallel attempts cannot all pass a check made before any of them was counted. The attempt
 * that reaches a subject's limit locks it (and is still checked); any attempt past the limit,
 * or while an earlier lock holds, is refused.
 */
export async function reserveAttempt(db: Queryable, source: AttemptSource, limits: ThrottleLimits = defaultThrottleLimits): Promise<Reservation> {
  const subjects = subjectsOf(source, limits).sort((a, b) => a.subject.localeCompare(b.subject));
  const { rows } = await db.query<{ subject: string; refused: boolean; locked_now: boolean; seconds: number | null }>({
    name: 'auth_throttle_reserve',
    text: `WITH attempt AS (SELECT * FROM unnest($1::text[], $2::int[]) AS a(subject, lim)),
           counted AS (
             INSERT INTO sign_in_throttle AS t (subject, failures, window_started_at, locked_until)
             SELECT subject, 1, now(), CASE WHEN 1 >= lim THEN now() + $4::int * interval '1 second' END
             FROM attempt
             ON CONFLICT (subject) DO UPDATE SET
               failures = CASE WHEN t.window_started_at < now() - $3::int * interval '1 second' THEN 1 ELSE t.failures + 1 END,
               window_started_at = CASE WHEN t.window_started_at < now() - $3::int * interval '1 second' THEN now() ELSE t.window_started_at END,
               locked_until = CASE
                 WHEN t.locked_until > now() THEN t.locked_until
                 WHEN (CASE WHEN t.window_started_at < now() - $3::int * interval '1 second' THEN 1 ELSE t.failures + 1 END)
                      >= (SELECT lim FROM attempt WHERE attempt.subject = t.subject) THEN now() + $4::int * interval '1 second'
               END
             RETURNING subject, failures, locked_until
           )
           SELECT counted.subject,
                  counted.failures > attempt.lim OR (counted.locked_until > now() AND counted.locked_until <> now() + $4::int * interval '1 second') AS refused,
                  counted.failures = attempt.lim AND counted.locked_until = now() + $4::int * interval '1 second' AS locked_now,
                  ceil(extract(epoch FROM counted.locked_until - now()))::int AS seconds
           FROM counted JOIN attempt USING (subject)`,
    values: [subjects.map((s) => s.subject), subjects.map((s) => s.limit), limits.windowSeconds, limits.lockSeconds],
  });
  const refused = rows.filter((row) => row.refused);
  return {
    refusedSeconds: refused.length > 0 ? Math.max(1, ...refused.map((row) => row.seconds ?? limits.lockSeconds)) : 0,
    lockedNow: rows.filter((row) => row.locked_now && !row.refused).map((row) => row.subject),
  };
}

/** A successful sign-in: the account's (or the device's) count and lock go, and the attempt no longer counts against the address. */
export async function recordSuccess(db: Queryable, source: AttemptSource): Promise<void> {
  const [first, second] = subjectsOf(source);
  await db.query({
    name: 'auth_throttle_success',
    text: `WITH own AS (DELETE FROM sign_in_throttle WHERE subject = $1)
           UPDATE sign_in_throttle SET failures = greatest(failures - 1, 0) WHERE subject = $2`,
    values: [first?.subject ?? null, second?.subject ?? null],
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
