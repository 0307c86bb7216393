// Operator accounts: creation, role changes, disabling and enabling, password resets and
// changes. The dashboard's role may not write these tables: each change is one call to a
// SECURITY DEFINER function (migration 0014) that checks who acts (an enabled admin's live
// session, or the owner for the CLI and the first admin), makes the change, ends the sessions
// it must and writes the audit row, all in one statement.
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { storableText } from '../storable';
import type pg from 'pg';
import type { Queryable } from '@retrysafe/store/postgres';
import { hashPassword, passwordSchema, verifyPassword } from './passwords';
import { operatorRoles, type OperatorRole } from './roles';
import { recordSuccess, reserveAttempt } from './throttle';

export const newOperatorSchema = z.strictObject({
  email: z.email().max(254).transform((email) => email.toLowerCase()),
  password: passwordSchema,
  role: z.enum(operatorRoles),
  name: storableText().trim().min(1).max(200).optional(),
});
export type NewOperator = z.input<typeof newOperatorSchema>;

export interface Operator {
  id: string;
  email: string;
  name: string;
  role: OperatorRole;
  disabled: boolean;
  createdAt: Date;
}

export class OperatorExistsError extends Error {
  readonly code = 'OPERATOR_EXISTS';
  constructor(email: string) {
    super(`an operator with email ${email} already exists`);
  }
}

export class OperatorNotFoundError extends Error {
  readonly code = 'OPERATOR_NOT_FOUND';
  constructor() {
    super('no such operator');
  }
}

export class ActorRefusedError extends Error {
  readonly code = 'ACTOR_REFUSED';
  constructor() {
    super('This needs a live session of an enabled admin');
  }
}

export class OwnPasswordResetError extends Error {
  readonly code = 'OWN_PASSWORD_RESET';
  constructor() {
    super('Change your own password on the account page, with your current one');
  }
}

export class WrongPasswordError extends Error {
  readonly code = 'WRONG_PASSWORD';
  constructor() {
    super('The current password is not right');
  }
}

export class PasswordLockedError extends Error {
  readonly code = 'PASSWORD_LOCKED';
  constructor(readonly retryAfterSeconds: number) {
    super(`Too many wrong passwords: try again in ${Math.ceil(retryAfterSeconds / 60)} minutes`);
  }
}

/**
 * Who acts on operators: an admin by the session they act from (the database checks it is live
 * and an enabled admin's, and audits that admin), or the owner by name (CLI, first admin: the
 * database checks the caller could write the operators table itself).
 */
export type OperatorActor = { sessionTokenHash: string } | { system: string };

/** The same id shape better-auth generates (32 URL-safe characters). */
const newId = () => randomBytes(24).toString('base64url');

const UNIQUE_VIOLATION = '23505';

/** The operator functions' refusals (their SQLSTATEs, migration 0014) as typed errors. */
function operatorError(error: unknown): unknown {
  switch ((error as { code?: string }).code) {
    case 'RS403':
      return new ActorRefusedError();
    case 'RS404':
      return new OperatorNotFoundError();
    case 'RS409':
      return new LastAdminError();
    case 'RS422':
      return new OwnPasswordResetError();
    default:
      return error;
  }
}

async function callOperatorFunction<R extends pg.QueryResultRow>(db: Queryable, text: string, values: unknown[]): Promise<R[]> {
  try {
    return (await db.query<R>(text, values)).rows;
  } catch (error) {
    throw operatorError(error);
  }
}

const actorValues = (actor: OperatorActor) => ('system' in actor ? [null, actor.system] : [actor.sessionTokenHash, null]);

export async function createOperator(db: Queryable, input: NewOperator, actor: OperatorActor): Promise<Operator> {
  const operator = newOperatorSchema.parse(input);
  const passwordHash = await hashPassword(operator.password);
  const id = newId();
  const name = operator.name ?? operator.email.split('@')[0] ?? operator.email;
  const rows = await callOperatorFunction<{ created_at: Date }>(db, 'SELECT created_at FROM retrysafe_operator_create($1, $2, $3, $4, $5, $6, $7, $8)', [
    ...actorValues(actor),
    id,
    newId(),
    name,
    operator.email,
    operator.role,
    passwordHash,
  ]).catch((error: unknown) => {
    if ((error as { code?: string }).code === UNIQUE_VIOLATION) throw new OperatorExistsError(operator.email);
    throw error;
  });
  return { id, email: operator.email, name, role: operator.role, disabled: false, createdAt: rows[0]?.created_at ?? new Date() };
}

export async function listOperators(db: Queryable): Promise<Operator[]> {
  const { rows } = await db.query<{ id: string; email: string; name: string; role: OperatorRole; banned: boolean; created_at: Date }>(
    'SELECT id, email, name, role, banned, created_at FROM operators ORDER BY email',
  );
  return rows.map((row) => ({ id: row.id, email: row.email, name: row.name, role: row.role, disabled: row.banned, createdAt: row.created_at }));
}

export async function countOperators(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM operators');
  return rows[0]?.n ?? 0;
}

export const operatorChangeSchema = z
  .strictObject({ role: z.enum(operatorRoles).optional(), disabled: z.boolean().optional(), reason: storableText().trim().min(1).max(500) })
  .refine((change) => change.role !== undefined || change.disabled !== undefined, 'change the role, disabled, or both');
export type OperatorChange = z.infer<typeof operatorChangeSchema>;

export class LastAdminError extends Error {
  readonly code = 'LAST_ADMIN';
  constructor() {
    super('This is the last enabled admin: make another admin first');
  }
}

/**
 * Changes a role and/or disables or enables (an admin); disabling ends the operator's sessions.
 * The function locks the admins' rows first, so two admins demoting each other at once cannot
 * leave none.
 */
export async function changeOperator(db: Queryable, operatorId: string, change: OperatorChange, actor: { sessionTokenHash: string }): Promise<Operator> {
  const rows = await callOperatorFunction<{ id: string; email: string; name: string; role: OperatorRole; banned: boolean; created_at: Date }>(
    db,
    'SELECT id, email, name, role, banned, created_at FROM retrysafe_operator_change($1, $2, $3, $4, $5)',
    [actor.sessionTokenHash, operatorId, change.role ?? null, change.disabled ?? null, change.reason],
  );
  const row = rows[0];
  if (!row) throw new OperatorNotFoundError();
  return { id: row.id, email: row.email, name: row.name, role: row.role, disabled: row.banned, createdAt: row.created_at };
}

export const passwordResetSchema = z.strictObject({ reason: storableText().trim().min(1).max(500) });

export interface PasswordReset {
  email: string;
  /** Shown to the admin once, to hand over out of band; never stored or logged. */
  password: string;
  sessionsEnded: number;
}

/** A generated password: 24 URL-safe characters (144 bits), within the operator password rule. */
export const generatePassword = () => passwordSchema.parse(randomBytes(18).toString('base64url'));

/**
 * An admin resets another operator's password to a generated one, returned once; every
 * session of that operator ends. Audited (operator.password_reset) with the reason.
 */
export async function resetOperatorPassword(db: Queryable, operatorId: string, input: z.input<typeof passwordResetSchema>, actor: { sessionTokenHash: string }): Promise<PasswordReset> {
  const { reason } = passwordResetSchema.parse(input);
  const password = generatePassword();
  const rows = await callOperatorFunction<{ email: string; sessions_ended: number }>(
    db,
    'SELECT email, sessions_ended FROM retrysafe_operator_reset_password($1, $2, $3, $4)',
    [actor.sessionTokenHash, operatorId, await hashPassword(password), reason],
  );
  const row = rows[0];
  if (!row) throw new OperatorNotFoundError();
  return { email: row.email, password, sessionsEnded: row.sessions_ended };
}

export const passwordChangeSchema = z
  .strictObject({ currentPassword: z.string().min(1).max(1_024), newPassword: passwordSchema, confirmation: z.string().max(1_024) })
  .refine((change) => change.confirmation === change.newPassword, { error: 'does not match the new password', path: ['confirmation'] })
  .refine((change) => change.newPassword !== change.currentPassword, { error: 'must differ from the current password', path: ['newPassword'] });
export type PasswordChange = z.input<typeof passwordChangeSchema>;

/**
 * An operator changes their own password from their session: the current one is checked
 * (counted against the account like a sign-in, so a stolen session cannot guess it), and every
 * other session of theirs ends. Audited (operator.password_change).
 */
export async function changeOwnPassword(
  db: Queryable,
  /** Sign-in's pool (AUTH_ROLE): the only one beside the owner that may read the current hash. */
  credentials: Queryable,
  you: { id: string; email: string; sessionTokenHash: string },
  input: PasswordChange,
): Promise<{ otherSessionsEnded: number }> {
  const change = passwordChangeSchema.parse(input);
  // Counted like a sign-in from an unknown device, against the account.
  const source = { email: you.email, address: null, device: null };
  const reservation = await reserveAttempt(db, source);
  if (reservation.refusedSeconds > 0) throw new PasswordLockedError(reservation.refusedSeconds);
  const credential = await callOperatorFunction<{ password: string | null }>(credentials, 'SELECT password FROM retrysafe_operator_credential($1)', [you.id]);
  const current = credential[0]?.password;
  if (!current || !(await verifyPassword({ hash: current, password: change.currentPassword }))) throw new WrongPasswordError();
  await recordSuccess(db, source);
  const rows = await callOperatorFunction<{ sessions_ended: number }>(db, 'SELECT sessions_ended FROM retrysafe_operator_change_password($1, $2)', [
    you.sessionTokenHash,
    await hashPassword(change.newPassword),
  ]);
  return { otherSessionsEnded: rows[0]?.sessions_ended ?? 0 };
}
