// Writes to the append-only audit log. A change is recorded with the transaction of the change,
// so the two commit or vanish together; a read (a key lookup through the store's backend seam)
// is recorded on its own, before its result is returned.
import type { Queryable } from '@retrysafe/store/postgres';
import type { AuditAction } from './actions';

export interface AuditEntry {
  actor: string;
  action: AuditAction;
  /** Identifiers of what was touched; never stored responses or request bodies. */
  target: Record<string, unknown>;
  reason?: string | null;
  details?: Record<string, unknown> | null;
}

export async function writeAudit(db: Queryable, entry: AuditEntry): Promise<void> {
  await db.query({
    name: 'audit_write',
    text: 'INSERT INTO audit_log (actor, action, target, reason, details) VALUES ($1, $2, $3, $4, $5)',
    values: [entry.actor, entry.action, JSON.stringify(entry.target), entry.reason ?? null, entry.details ? JSON.stringify(entry.details) : null],
  });
}

/** Written for every unknown email, so that strangers' guesses do not each make a row of their own. */
export const UNKNOWN_ACCOUNT = '(unknown account)';

export interface SignInAttemptEntry {
  action: Extract<AuditAction, 'auth.sign_in_failed' | 'auth.sign_in_refused'>;
  /** The account's email, or UNKNOWN_ACCOUNT when no operator has it. */
  actor: string;
  address: string | null;
  /** Aggregation window (the throttle's), aligned to the epoch. */
  windowSeconds: number;
  details?: Record<string, unknown>;
}

/**
 * Counts a failed or refused sign-in in the one row of its (action, actor, address, window),
 * through retrysafe_audit_sign_in_attempt (migration 0013): unauthenticated traffic adds at most
 * a row per account and address per window. Returns the row's count so far.
 */
export async function recordSignInAttempt(db: Queryable, entry: SignInAttemptEntry): Promise<number> {
  const { rows } = await db.query<{ occurrences: string }>({
    name: 'audit_sign_in_attempt',
    text: 'SELECT retrysafe_audit_sign_in_attempt($1, $2, $3, $4, $5, $6) AS occurrences',
    values: [entry.action, entry.actor, JSON.stringify({ email: entry.actor }), JSON.stringify({ address: entry.address, ...entry.details }), entry.address, entry.windowSeconds],
  });
  return Number(rows[0]?.occurrences ?? 0);
}
