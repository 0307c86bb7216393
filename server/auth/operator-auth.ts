// Operator sign-in with better-auth: email and password (argon2id), sessions stored in
// Postgres by the SHA-256 of their token (./operator-store.ts, through the operator functions
// of migration 0014) and looked up on every request (no cookie cache, so ending a session ends access
// at once), an HttpOnly SameSite=Strict cookie, Secure when the dashboard is served over
// TLS. Sign-up is off: operators are created by an admin or the CLI (./operators.ts). Sign-in
// runs in one adapter transaction with its audit row; failures are throttled and audited.
import { runWithTransaction } from '@better-auth/core/context';
import { generateId } from '@better-auth/core/utils/id';
import { betterAuth } from 'better-auth/minimal';
import { APIError, createAuthMiddleware } from 'better-auth/api';
import { getCurrentAdapter, type BetterAuthPlugin } from 'better-auth';
import type pg from 'pg';
import { z } from 'zod';
import { storableText } from '../storable';
import { writeAudit } from '../audit/log';
import { logger } from '../logging';
import { operatorStore, sessionTokenHash } from './operator-store';
import { hashPassword, verifyPassword } from './passwords';
import { isOperatorRole, type OperatorRole } from './roles';
import { recordSuccess, reserveAttempt, type ThrottleLimits } from './throttle';
import type { AuditAction } from '../audit/actions';

export interface OperatorAuthOptions {
  /** The dashboard's pool (its restricted role). */
  pool: pg.Pool;
  /** Signs the session cookie; at least 32 characters. */
  secret: string;
  /** Where operators reach the dashboard; an https URL makes the cookie Secure. */
  baseURL: string;
  /** Framework glue, e.g. better-auth's nextCookies() in the Next app (it must come last). */
  plugins?: BetterAuthPlugin[];
  /** Idle lifetime: a session unused this long ends (each use after the first hour extends it). */
  sessionSeconds?: number;
  /** Absolute lifetime from sign-in, however much the session is used: a stolen token dies with it. */
  absoluteSessionSeconds?: number;
  throttle?: ThrottleLimits;
}

const SESSION_SECONDS = 8 * 3_600;
export const ABSOLUTE_SESSION_SECONDS = 8 * 3_600;

/**
 * Each auth instance's absolute session lifetime, kept on the instance itself under a global
 * symbol: Next bundles route handlers and server actions with separate copies of this module,
 * and they share one instance (globalThis), so a map local to the module would miss it.
 */
const ABSOLUTE_LIFETIME = Symbol.for('retrysafe.absoluteSessionMs');
type WithLifetime = { [ABSOLUTE_LIFETIME]?: number };

/** The audit log as a better-auth model, so a sign-in's audit row shares its transaction. */
const auditModel = {
  id: 'retrysafe-audit',
  schema: {
    auditLog: {
      disableMigration: true,
      fields: {
        at: { type: 'date', required: false, input: false },
        actor: { type: 'string', required: true },
        action: { type: 'string', required: true },
        target: { type: 'json', required: true },
        reason: { type: 'string', required: false },
        details: { type: 'json', required: false },
      },
    },
  },
} satisfies BetterAuthPlugin;

export function createOperatorAuth(options: OperatorAuthOptions) {
  const auth = betterAuth({
    appName: 'Retrysafe',
    baseURL: options.baseURL,
    secret: options.secret,
    telemetry: { enabled: false },
    // Through the redacting logger, message only: its extra arguments may carry request data.
    logger: { level: 'warn', log: (level, message) => logger[level === 'debug' ? 'debug' : level](message) },
    database: operatorStore(options.pool),
    emailAndPassword: {
      enabled: true,
      disableSignUp: true,
      autoSignIn: false,
      minPasswordLength: 12,
      maxPasswordLength: 128,
      password: { hash: hashPassword, verify: verifyPassword },
    },
    user: {
      additionalFields: {
        role: { type: 'string', required: false, input: false },
        banned: { type: 'boolean', required: false, input: false },
      },
    },
    session: { expiresIn: options.sessionSeconds ?? SESSION_SECONDS, updateAge: 3_600, cookieCache: { enabled: false } },
    // Sign-in goes through signInOperator (server actions), which throttles per account and
    // address in Postgres; the HTTP endpoints are not mounted.
    rateLimit: { enabled: false },
    advanced: {
      cookiePrefix: 'retrysafe',
      useSecureCookies: options.baseURL.startsWith('https://'),
      defaultCookieAttributes: { sameSite: 'strict', httpOnly: true },
      // The audit log's bigserial fills its own id; better-auth's ids elsewhere.
      database: { generateId: ({ model, size }) => (model === 'auditLog' ? false : generateId(size)) },
    },
    databaseHooks: {
      session: {
        create: {
          // A disabled operator gets no new session (live ones were deleted when disabled).
          async before(session) {
            const { rows } = await options.pool.query<{ banned: boolean }>('SELECT banned FROM operators WHERE id = $1', [session.userId]);
            if (rows[0]?.banned !== false) throw new APIError('FORBIDDEN', { message: 'This operator is disabled' });
          },
        },
      },
    },
    hooks: {
      after: createAuthMiddleware(async (ctx) => {
        const created = ctx.context.newSession;
        if (ctx.path !== '/sign-in/email' || !created) return;
        // Inside signInOperator's transaction: the session and this row commit together.
        const adapter = await getCurrentAdapter(ctx.context.adapter);
        await adapter.create({
          model: 'auditLog',
          data: {
            actor: created.user.email,
            action: 'auth.sign_in' satisfies AuditAction,
            target: { operatorId: created.user.id },
            details: { address: created.session.ipAddress ?? null },
          },
        });
      }),
    },
    plugins: [auditModel, ...(options.plugins ?? [])],
  });
  (auth as WithLifetime)[ABSOLUTE_LIFETIME] = (options.absoluteSessionSeconds ?? ABSOLUTE_SESSION_SECONDS) * 1000;
  return auth;
}

export type OperatorAuth = ReturnType<typeof createOperatorAuth>;

export interface SessionOperator {
  id: string;
  email: string;
  name: string;
  role: OperatorRole;
  sessionId: string;
  /**
   * The SHA-256 of the session's token: what the database's operator functions recognise the
   * acting session by (migration 0014). Server-side only, like the cookie: never render it.
   */
  sessionTokenHash: string;
}

/**
 * The operator behind a request's session cookie, or null (no session, idle past its lifetime,
 * past its absolute lifetime from sign-in, disabled, unknown role).
 */
export async function readOperatorSession(auth: OperatorAuth, headers: Headers): Promise<SessionOperator | null> {
  const found = await auth.api.getSession({ headers });
  if (!found) return null;
  const { user, session } = found;
  if (session.createdAt.getTime() + ((auth as WithLifetime)[ABSOLUTE_LIFETIME] ?? ABSOLUTE_SESSION_SECONDS * 1000) <= Date.now()) return null;
  if (user.banned === true || !isOperatorRole(user.role)) return null;
  return { id: user.id, email: user.email, name: user.name, role: user.role, sessionId: session.id, sessionTokenHash: sessionTokenHash(session.token) };
}

export const signInSchema = z.object({
  email: storableText().trim().max(254).transform((email) => email.toLowerCase()),
  password: z.string().max(1_024),
});

export type SignInResult = { ok: true; setCookie: string[] } | { ok: false; reason: 'invalid' } | { ok: false; reason: 'locked'; retryAfterSeconds: number };

/**
 * Signs an operator in; the session cookie is returned as Set-Cookie values (and set by the
 * framework glue plugin where there is one). Locked subjects are
 * refused before the password is checked; a failure counts against the account and the
 * address and is audited; a success is audited in the session's own transaction.
 */
/**
 * better-auth's refusal (wrong password, disabled operator), recognised by its name and status
 * rather than instanceof: the Next server bundles route handlers and server actions apart, and
 * the auth instance one of them created (shared on globalThis) throws the other's APIError class.
 */
function isAuthRefusal(error: unknown): error is Error & { status: string | number } {
  return error instanceof Error && error.name === 'APIError' && 'status' in error;
}

export async function signInOperator(
  auth: OperatorAuth,
  pool: pg.Pool,
  input: { email: string; password: string },
  request: { headers: Headers; address: string | null },
  limits?: ThrottleLimits,
): Promise<SignInResult> {
  const parsed = signInSchema.safeParse(input);
  if (!parsed.success) return { ok: false, reason: 'invalid' };
  const { email, password } = parsed.data;
  // Counted before the password is checked, so a burst of attempts cannot outrun the limit.
  const locked = await reserveAttempt(pool, email, request.address, limits);
  if (locked > 0) {
    await writeAudit(pool, { actor: email, action: 'auth.sign_in_locked', target: { email }, details: { address: request.address } });
    return { ok: false, reason: 'locked', retryAfterSeconds: locked };
  }
  const context = await auth.$context;
  let setCookie: string[];
  try {
    const signedIn = await runWithTransaction(context.adapter, () =>
      auth.api.signInEmail({ body: { email, password, rememberMe: false }, headers: request.headers, returnHeaders: true }),
    );
    setCookie = signedIn.headers.getSetCookie();
  } catch (error) {
    if (!isAuthRefusal(error)) throw error;
    await writeAudit(pool, { actor: email, action: 'auth.sign_in_failed', target: { email }, details: { address: request.address, status: error.status } });
    return { ok: false, reason: 'invalid' };
  }
  await recordSuccess(pool, email, request.address);
  return { ok: true, setCookie };
}

/** Ends the request's session server-side (the row is deleted) and audits it. */
export async function signOutOperator(auth: OperatorAuth, pool: pg.Pool, headers: Headers): Promise<void> {
  const operator = await readOperatorSession(auth, headers);
  await auth.api.signOut({ headers });
  if (operator) await writeAudit(pool, { actor: operator.email, action: 'auth.sign_out', target: { operatorId: operator.id, sessionId: operator.sessionId } });
}
