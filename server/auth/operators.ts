// Operator accounts: creation, role changes, disabling and enabling, each audited in the
// same transaction as the change. Rows are in better-auth's model shape (an operator and a
// "credential" account holding the argon2id hash), written here with plain SQL so the
// change and its audit row commit together. Disabling deletes every live session at once.
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { storableText } from '../storable';
import { inTransaction, type Connectable } from '../../db/transaction';
import { writeAudit } from '../audit/log';
import type { Queryable } from '@retrysafe/store/postgres';
import { hashPassword, passwordSchema } from './passwords';
import { operatorRoles, type OperatorRole } from './roles';

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

/** The same id shape better-auth generates (32 URL-safe characters). */
const newId = () => randomBytes(24).toString('base64url');

const UNIQUE_VIOLATION = '23505';

export async function createOperator(pool: Connectable, input: NewOperator, actor: string): Promise<Operator> {
  const operator = newOperatorSchema.parse(input);
  const passwordHash = await hashPassword(operator.password);
  return inTransaction(pool, async (db) => {
    const id = newId();
    const { rows } = await db
      .query<{ created_at: Date }>(
        `INSERT INTO operators (id, name, email, role) VALUES ($1, $2, $3, $4) RETURNING created_at`,
        [id, operator.name ?? operator.email.split('@')[0], operator.email, operator.role],
      )
      .catch((error: unknown) => {
        if ((error as { code?: string }).code === UNIQUE_VIOLATION) throw new OperatorExistsError(operator.email);
        throw error;
      });
    await db.query(`INSERT INTO operator_accounts (id, account_id, provider_id, user_id, password) VALUES ($1, $2, 'credential', $2, $3)`, [
      newId(),
      id,
      passwordHash,
    ]);
    await writeAudit(db, { actor, action: 'operator.create', target: { operatorId: id, email: operator.email }, details: { role: operator.role } });
    return { id, email: operator.email, name: operator.name ?? operator.email.split('@')[0] ?? operator.email, role: operator.role, disabled: false, createdAt: rows[0]?.created_at ?? new Date() };
  });
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
 * Changes a role and/or disables or enables; disabling deletes the operator's sessions in the
 * same transaction. The admins' rows are locked first, so two admins demoting each other at
 * once cannot leave none.
 */
export async function changeOperator(pool: Connectable, operatorId: string, change: OperatorChange, actor: string): Promise<Operator> {
  return inTransaction(pool, async (db) => {
    await db.query("SELECT id FROM operators WHERE role = 'admin' ORDER BY id FOR UPDATE");
    const { rows } = await db.query<{ id: string; email: string; name: string; role: OperatorRole; banned: boolean; created_at: Date; old_role: OperatorRole; was_banned: boolean }>(
      `UPDATE operators o SET role = coalesce($2, o.role), banned = coalesce($3, o.banned),
         ban_reason = CASE WHEN $3 THEN $4 WHEN $3 = false THEN NULL ELSE o.ban_reason END, updated_at = now()
       FROM (SELECT id, role AS old_role, banned AS was_banned FROM operators WHERE id = $1 FOR UPDATE) old
       WHERE o.id = old.id
       RETURNING o.id, o.email, o.name, o.role, o.banned, o.created_at, old.old_role, old.was_banned`,
      [operatorId, change.role ?? null, change.disabled ?? null, change.reason],
    );
    const row = rows[0];
    if (!row) throw new OperatorNotFoundError();
    if (row.old_role === 'admin' && !row.was_banned && (row.role !== 'admin' || row.banned)) {
      const admins = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM operators WHERE role = 'admin' AND NOT banned");
      if ((admins.rows[0]?.n ?? 0) === 0) throw new LastAdminError();
    }
    let sessionsEnded = 0;
    if (row.banned) {
      const ended = await db.query('DELETE FROM operator_sessions WHERE user_id = $1', [operatorId]);
      sessionsEnded = ended.rowCount ?? 0;
    }
    await writeAudit(db, {
      actor,
      action: change.disabled === true ? 'operator.disable' : change.disabled === false ? 'operator.enable' : 'operator.role',
      target: { operatorId, email: row.email },
      reason: change.reason,
      details: { role: { from: row.old_role, to: row.role }, disabled: { from: row.was_banned, to: row.banned }, sessionsEnded },
    });
    return { id: row.id, email: row.email, name: row.name, role: row.role, disabled: row.banned, createdAt: row.created_at };
  });
}
