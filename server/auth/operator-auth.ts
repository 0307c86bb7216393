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
import { recordSignInAttempt, UNKNOWN_ACCOUNT, writeAudit } from '../audit/log';
import { logger } from '../logging';
import { operatorStore, sessionTokenHash } from './operator-store';
import { configureSignInHashing, hashPassword, PasswordHashingBusyError, verifyPassword, withSignInHashingSlot } from './passwords';
import { deviceCookieOf, deviceSetCookie, issueDeviceCookie, verifyDeviceCookie } from './device-cookie';
import { CLIENT_ADDRESS_HEADER, clientAddressOf } from '../client-address';
import { isOperatorRole, type OperatorRole } from './roles';
import { defaultThrottleLimits, recordSuccess, reserveAttempt, type ThrottleLimits } from './throttle';
import type { AuditAction } from '../audit/actions';

export interface OperatorAuthOptions {
  /** Sign-in's pool: connected as AUTH_ROLE (db/dashboard-access.ts), the one role that may read credentials and sessions. */
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
  /**
   * Sign-ins from unknown devices whose password is checked per second in this process
   * (server/auth/passwords.ts; default UNKNOWN_DEVICE_HASHES_PER_SECOND). One budget per process: setting it here sets it for every instance.
   */
  signInHashesPerSecond?: number;
}

const SESSION_SECONDS = 8 * 3_600;
export const ABSOLUTE_SESSION_SECONDS = 8 * 3_600;

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
  if (options.signInHashesPerSecond !== undefined) configureSignInHashing(options.signInHashesPerSecond);
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
      // The session's address is the one the HTTP front resolved (TRUST_PROXY), never a client-written header.
      ipAddress: { ipAddressHeaders: [CLIENT_ADDRESS_HEADER] },
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
            // The address signInOperator was given (the HTTP front's, from TRUST_PROXY), never better-auth's guess.
            details: { address: ctx.headers ? clientAddressOf(ctx.headers) : null },
          },
        });
      }),
    },
    plugins: [auditModel, ...(options.plugins ?? [])],
  });
  // On the instance itself, by name: the server's one runtime makes one instance, and every copy
  // of this module Next bundles (route handlers, server actions) reads it from there.
  return Object.assign(auth, { absoluteSessionMs: (options.absoluteSessionSeconds ?? ABSOLUTE_SESSION_SECONDS) * 1000 });
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
  if (session.createdAt.getTime() + auth.absoluteSessionMs <= Date.now()) return null;
  if (user.banned === true || !isOperatorRole(user.role)) return null;
  return { id: user.id, email: user.email, name: user.name, role: user.role, sessionId: session.id, sessionTokenHash: sessionTokenHash(session.token) };
}

export const signInSchema = z.object({
  email: storableText().trim().max(254).transform((email) => email.toLowerCase()),
  password: z.string().max(1_024),
});

export type SignInResult =
  | { ok: true; setCookie: string[] }
  | { ok: false; reason: 'invalid' }
  | { ok: false; reason: 'locked'; retryAfterSeconds: number }
  /** Every password-hashing slot is taken (server/auth/passwords.ts): nothing was counted or checked. */
  | { ok: false; reason: 'busy'; retryAfterSeconds: number };

/**
 * better-auth's refusal (wrong password, disabled operator), recognised by its name and status
 * rather than instanceof: the Next server bundles route handlers and server actions apart, and
 * the auth instance one of them created (shared on globalThis) throws the other's APIError class.
 */
function isAuthRefusal(error: unknown): error is Error & { status: string | number } {
  return error instanceof Error && error.name === 'APIError' && 'status' in error;
}

/** The request's headers with the client address signInOperator was given, for the session row and its audit row. */
function withAddress(headers: Headers, address: string | null): Headers {
  const copy = new Headers(headers);
  if (address) copy.set(CLIENT_ADDRESS_HEADER, address);
  else copy.delete(CLIENT_ADDRESS_HEADER);
  return copy;
}

/** The audit actor of a failed attempt: the email when an operator has it, else one shared name (bounded rows). */
async function attemptActor(pool: pg.Pool, email: string): Promise<string> {
  const { rows } = await pool.query({ name: 'auth_known_email', text: 'SELECT 1 FROM operators WHERE email = $1', values: [email] });
  return rows.length > 0 ? email : UNKNOWN_ACCOUNT;
}

/**
 * Signs an operator in; the session cookie and a fresh device cookie are returned as
 * Set-Cookie values (the session's is also set by the framework glue plugin where there is
 * one). First a password-hashing slot is taken (server/auth/passwords.ts), or the attempt is
 * refused as busy at once.
 * Then the attempt is counted (per device for a valid device cookie, else per account and
 * known address) and refused while a lock holds; a failure or refusal is counted in its
 * aggregated audit row, a new lock and a success are audited one row each.
 */
export async function signInOperator(
  auth: OperatorAuth,
  pool: pg.Pool,
  input: { email: string; password: string },
  request: { headers: Headers; address: string | null },
  limits: ThrottleLimits = defaultThrottleLimits,
): Promise<SignInResult> {
  const parsed = signInSchema.safeParse(input);
  if (!parsed.success) return { ok: false, reason: 'invalid' };
  const context = await auth.$context;
  // An HMAC check, before any hashing: a known device skips the strangers' hashing budget.
  const device = verifyDeviceCookie(context.secret, deviceCookieOf(request.headers), parsed.data.email);
  try {
    return await withSignInHashingSlot(() => attemptSignIn(auth, pool, parsed.data, device, request, limits), device !== null);
  } catch (error) {
    // Thrown by this bundle's own copy of passwords.ts (the slots are shared, the class is not).
    if (error instanceof PasswordHashingBusyError) return { ok: false, reason: 'busy', retryAfterSeconds: error.retryAfterSeconds };
    throw error;
  }
}

async function attemptSignIn(
  auth: OperatorAuth,
  pool: pg.Pool,
  { email, password }: { email: string; password: string },
  device: string | null,
  request: { headers: Headers; address: string | null },
  limits: ThrottleLimits,
): Promise<SignInResult> {
  const context = await auth.$context;
  const source = { email, address: request.address, device };
  // Counted before the password is checked, so a burst of attempts cannot outrun the limit.
  const reservation = await reserveAttempt(pool, source, limits);
  if (reservation.refusedSeconds > 0) {
    await recordSignInAttempt(pool, { action: 'auth.sign_in_refused', actor: await attemptActor(pool, email), address: request.address, windowSeconds: limits.windowSeconds });
    return { ok: false, reason: 'locked', retryAfterSeconds: reservation.refusedSeconds };
  }
  let setCookie: string[];
  try {
    const signedIn = await runWithTransaction(context.adapter, () =>
      auth.api.signInEmail({ body: { email, password, rememberMe: false }, headers: withAddress(request.headers, request.address), returnHeaders: true }),
    );
    setCookie = signedIn.headers.getSetCookie();
  } catch (error) {
    if (!isAuthRefusal(error)) throw error;
    const actor = await attemptActor(pool, email);
    await recordSignInAttempt(pool, { action: 'auth.sign_in_failed', actor, address: request.address, windowSeconds: limits.windowSeconds });
    // A lock this attempt placed, once: an operator's account, an address or a device (never an unknown email's: unbounded).
    for (const subject of reservation.lockedNow) {
      if (subject.startsWith('email:') && actor === UNKNOWN_ACCOUNT) continue;
      const [kind] = subject.split(':');
      await writeAudit(pool, {
        actor: kind === 'ip' ? (request.address ?? 'unknown') : actor,
        action: 'auth.sign_in_locked',
        target: kind === 'email' ? { email } : kind === 'ip' ? { address: request.address } : { email, device: 'known' },
        details: { address: request.address, lockedSeconds: limits.lockSeconds },
      });
    }
    return { ok: false, reason: 'invalid' };
  }
  await recordSuccess(pool, source);
  return { ok: true, setCookie: [...setCookie, deviceSetCookie(issueDeviceCookie(context.secret, email), context.baseURL.startsWith('https://'))] };
}

/** Ends the request's session server-side (the row is deleted) and audits it. */
export async function signOutOperator(auth: OperatorAuth, pool: pg.Pool, headers: Headers): Promise<void> {
  const operator = await readOperatorSession(auth, headers);
  await auth.api.signOut({ headers });
  if (operator) await writeAudit(pool, { actor: operator.email, action: 'auth.sign_out', target: { operatorId: operator.id, sessionId: operator.sessionId } });
}
