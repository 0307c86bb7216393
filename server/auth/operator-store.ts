// better-auth's database, narrowed to what operator sign-in uses and routed through the
// operator functions of migration 0014: the dashboard's role reads operators, and gets a
// credential, a session or a change only through a function that checks it. Sessions are
// stored by the SHA-256 of their token (the cookie's value never reaches the database) and
// handed back to better-auth with the token it asked with. Anything else better-auth might
// ask (another model, another query shape) is refused rather than guessed at.
import { createHash } from 'node:crypto';
import { createAdapterFactory, type CleanedWhere, type CustomAdapter } from 'better-auth/adapters';
import type pg from 'pg';
import type { Queryable } from '@retrysafe/store/postgres';

/** How a session token is stored and how the operator functions recognise the acting session. */
export function sessionTokenHash(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

export class UnsupportedAuthQueryError extends Error {
  readonly code = 'UNSUPPORTED_AUTH_QUERY';
  constructor(what: string) {
    super(`operator store: ${what} is not supported`);
  }
}

type Row = Record<string, unknown>;

const userColumns = `id, name, email, email_verified AS "emailVerified", image, created_at AS "createdAt", updated_at AS "updatedAt", role, banned`;
const sessionColumns = `id, expires_at AS "expiresAt", created_at AS "createdAt", updated_at AS "updatedAt", ip_address AS "ipAddress", user_agent AS "userAgent", user_id AS "userId"`;
const accountColumns = `id, account_id AS "accountId", provider_id AS "providerId", user_id AS "userId", password, created_at AS "createdAt", updated_at AS "updatedAt"`;

/** Equality conditions joined by AND, as a map; anything else is unsupported. */
function equalities(model: string, where: CleanedWhere[] | undefined): Map<string, CleanedWhere['value']> {
  const found = new Map<string, CleanedWhere['value']>();
  for (const condition of where ?? []) {
    if (condition.connector === 'OR') throw new UnsupportedAuthQueryError(`OR on ${model}`);
    if (condition.operator === 'eq' || condition.operator === 'in') found.set(condition.field, condition.value);
    else if (!(model === 'session' && condition.field === 'expiresAt' && condition.operator === 'gt')) {
      throw new UnsupportedAuthQueryError(`${condition.operator} on ${model}.${condition.field}`);
    }
  }
  return found;
}

function only(model: string, where: Map<string, unknown>, allowed: string[]): void {
  for (const field of where.keys()) if (!allowed.includes(field)) throw new UnsupportedAuthQueryError(`a condition on ${model}.${field}`);
}

function tokensOf(value: unknown): string[] {
  const tokens = Array.isArray(value) ? value : [value];
  if (!tokens.every((token): token is string => typeof token === 'string')) throw new UnsupportedAuthQueryError('a non-text session token');
  return tokens;
}

function notExpiredFilter(where: CleanedWhere[] | undefined): (row: Row) => boolean {
  const bound = where?.find((condition) => condition.field === 'expiresAt' && condition.operator === 'gt')?.value;
  return bound instanceof Date ? (row) => (row.expiresAt as Date) > bound : () => true;
}

function storeOn(db: Queryable): CustomAdapter {
  async function findUsers(where: Map<string, unknown>): Promise<Row[]> {
    only('user', where, ['id', 'email']);
    const [field, value] = [...where.entries()][0] ?? [];
    if (where.size !== 1 || (field !== 'id' && field !== 'email')) throw new UnsupportedAuthQueryError('a user query not by id or email');
    const values = Array.isArray(value) ? value : [value];
    const { rows } = await db.query<Row>(`SELECT ${userColumns} FROM operators WHERE ${field} = ANY ($1::text[])`, [values]);
    return rows;
  }

  async function findAccounts(where: Map<string, unknown>): Promise<Row[]> {
    only('account', where, ['userId', 'providerId', 'accountId']);
    const userId = where.get('userId');
    if (typeof userId !== 'string') throw new UnsupportedAuthQueryError('an account query not by one operator');
    const { rows } = await db.query<Row>(`SELECT ${accountColumns} FROM retrysafe_operator_credential($1)`, [userId]);
    return rows.filter((row) => [...where].every(([field, value]) => row[field] === value));
  }

  async function findSessions(where: CleanedWhere[] | undefined): Promise<Row[]> {
    const conditions = equalities('session', where);
    only('session', conditions, ['token']);
    const tokens = tokensOf(conditions.get('token'));
    const byHash = new Map(tokens.map((token) => [sessionTokenHash(token), token]));
    const { rows } = await db.query<Row & { tokenHash: string }>(`SELECT token_hash AS "tokenHash", ${sessionColumns} FROM retrysafe_session_find($1::text[])`, [[...byHash.keys()]]);
    return rows.map(({ tokenHash, ...session }) => ({ ...session, token: byHash.get(tokenHash) })).filter(notExpiredFilter(where));
  }

  async function find(model: string, where: CleanedWhere[] | undefined): Promise<Row[]> {
    if (model === 'user') return findUsers(equalities(model, where));
    if (model === 'account') return findAccounts(equalities(model, where));
    if (model === 'session') return findSessions(where);
    throw new UnsupportedAuthQueryError(`reading ${model}`);
  }

  function sessionToken(model: string, where: CleanedWhere[]): string {
    const conditions = equalities(model, where);
    const token = conditions.get('token');
    if (model !== 'session' || conditions.size !== 1 || typeof token !== 'string') throw new UnsupportedAuthQueryError(`changing ${model} other than one session by token`);
    return token;
  }

  return {
    async create({ model, data }) {
      const row = data as Row;
      if (model === 'session') {
        const token = String(row.token);
        const { rows } = await db.query<Row>(`SELECT ${sessionColumns} FROM retrysafe_session_create($1, $2, $3, $4, $5, $6)`, [
          row.id,
          sessionTokenHash(token),
          row.userId,
          row.expiresAt,
          row.ipAddress ?? null,
          row.userAgent ?? null,
        ]);
        return { ...rows[0], token } as unknown as typeof data;
      }
      if (model === 'auditLog') {
        // The sign-in hook's row, in the sign-in's transaction (the dashboard may append to the audit log).
        const { rows } = await db.query<Row>(
          `INSERT INTO audit_log (actor, action, target, reason, details) VALUES ($1, $2, $3::jsonb, $4, $5::jsonb)
           RETURNING id::text, at, actor, action, target, reason, details`,
          [row.actor, row.action, JSON.stringify(row.target), row.reason ?? null, row.details === undefined ? null : JSON.stringify(row.details)],
        );
        return rows[0] as unknown as typeof data;
      }
      throw new UnsupportedAuthQueryError(`creating ${model}`);
    },
    async findOne({ model, where }) {
      const rows = await find(model, where);
      return (rows[0] ?? null) as never;
    },
    async findMany({ model, where, limit }) {
      return (await find(model, where)).slice(0, limit) as never[];
    },
    async count({ model, where }) {
      return (await find(model, where)).length;
    },
    async update({ model, where, update }) {
      const token = sessionToken(model, where);
      const expiresAt = (update as Row).expiresAt;
      if (!(expiresAt instanceof Date)) throw new UnsupportedAuthQueryError('a session update other than its expiry');
      const { rows } = await db.query<Row>(`SELECT ${sessionColumns} FROM retrysafe_session_touch($1, $2)`, [sessionTokenHash(token), expiresAt]);
      return (rows[0] ? { ...rows[0], token } : null) as never;
    },
    updateMany({ model }) {
      // Password changes and operator changes go through server/auth/operators.ts.
      throw new UnsupportedAuthQueryError(`updating many ${model}`);
    },
    async delete({ model, where }) {
      await db.query('SELECT retrysafe_session_end($1)', [sessionTokenHash(sessionToken(model, where))]);
    },
    async deleteMany({ model, where }) {
      const conditions = equalities(model, where);
      if (model !== 'session' || conditions.size !== 1 || !conditions.has('token')) throw new UnsupportedAuthQueryError(`deleting many ${model} other than sessions by token`);
      let ended = 0;
      for (const token of tokensOf(conditions.get('token'))) {
        const { rows } = await db.query<{ ended: number }>('SELECT retrysafe_session_end($1) AS ended', [sessionTokenHash(token)]);
        ended += rows[0]?.ended ?? 0;
      }
      return ended;
    },
  };
}

const config = {
  adapterId: 'retrysafe-operators',
  adapterName: 'Retrysafe operator store',
  supportsJSON: true,
  supportsDates: true,
  supportsBooleans: true,
  supportsNumericIds: false,
};

/** better-auth's `database` option for the dashboard's pool; a sign-in runs in one transaction on one connection. */
export function operatorStore(pool: pg.Pool) {
  let lazyOptions: Parameters<ReturnType<typeof createAdapterFactory>>[0] | null = null;
  const factory = createAdapterFactory({
    config: {
      ...config,
      transaction: async (run) => {
        const client = await pool.connect();
        let broken: Error | undefined;
        try {
          await client.query('BEGIN');
          const inner = createAdapterFactory({ config: { ...config, transaction: false }, adapter: () => storeOn(client) });
          if (!lazyOptions) throw new Error('operator store used before better-auth initialised it');
          const result = await run(inner(lazyOptions));
          await client.query('COMMIT');
          return result;
        } catch (error) {
          await client.query('ROLLBACK').catch((rollbackError: unknown) => (broken = rollbackError as Error));
          throw error;
        } finally {
          client.release(broken);
        }
      },
    },
    adapter: () => storeOn(pool),
  });
  return (options: Parameters<typeof factory>[0]) => {
    lazyOptions = options;
    return factory(options);
  };
}
