// OWASP's device cookies: a successful sign-in leaves a cookie, signed with a key derived from
// AUTH_SECRET and bound to the account, naming a random device id. A later attempt for that
// account that presents it is throttled per device only, never by the account's or the
// address's lockout, so a stranger's wrong guesses cannot lock an operator out of a browser
// they have signed in from before. Stateless: nothing is stored until the device fails.
import { createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';

export const DEVICE_COOKIE = 'retrysafe.device';
/** How long a device stays known without a new sign-in (each sign-in issues a fresh cookie). */
export const DEVICE_COOKIE_SECONDS = 180 * 86_400;

const payloadSchema = z.strictObject({
  /** The account (lower-case email) it was issued to. */
  a: z.string().min(1).max(254),
  /** The device id: 128 random bits, base64url. */
  d: z.string().regex(/^[A-Za-z0-9_-]{22}$/),
  /** Issued at, seconds since the epoch. */
  t: z.number().int().nonnegative(),
});

function deviceKey(secret: string): Buffer {
  return Buffer.from(hkdfSync('sha256', secret, 'retrysafe', 'device cookie v1', 32));
}

function mac(secret: string, payload: string): Buffer {
  return createHmac('sha256', deviceKey(secret)).update(payload).digest();
}

/** A new cookie value for this account. */
export function issueDeviceCookie(secret: string, email: string, now = Date.now()): string {
  const payload = Buffer.from(JSON.stringify({ a: email.toLowerCase(), d: randomBytes(16).toString('base64url'), t: Math.floor(now / 1000) })).toString('base64url');
  return `${payload}.${mac(secret, payload).toString('base64url')}`;
}

/** The device id when `value` is a genuine, unexpired cookie issued to this account; else null. */
export function verifyDeviceCookie(secret: string, value: string | null | undefined, email: string, now = Date.now()): string | null {
  if (!value || value.length > 512) return null;
  const [payload = '', signature = '', ...rest] = value.split('.');
  if (rest.length > 0) return null;
  const expected = mac(secret, payload);
  const given = Buffer.from(signature, 'base64url');
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
  let decoded: unknown;
  try {
    decoded = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
  } catch {
    return null;
  }
  const parsed = payloadSchema.safeParse(decoded);
  if (!parsed.success || parsed.data.a !== email.toLowerCase()) return null;
  if (parsed.data.t * 1000 + DEVICE_COOKIE_SECONDS * 1000 <= now) return null;
  return parsed.data.d;
}

/** The device cookie's value among a request's cookies. */
export function deviceCookieOf(headers: Headers): string | null {
  for (const part of (headers.get('cookie') ?? '').split(';')) {
    const separator = part.indexOf('=');
    if (separator > 0 && part.slice(0, separator).trim() === DEVICE_COOKIE) return part.slice(separator + 1).trim();
  }
  return null;
}

/** The Set-Cookie line for a new device cookie: HttpOnly, SameSite=Strict, Secure over https. */
export function deviceSetCookie(value: string, secure: boolean): string {
  return `${DEVICE_COOKIE}=${value}; Path=/; Max-Age=${DEVICE_COOKIE_SECONDS}; HttpOnly; SameSite=Strict${secure ? '; Secure' : ''}`;
}
