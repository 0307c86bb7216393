// Structured logs (pino, JSON lines) with redaction that fails closed: whatever a caller
// passes, authorization and cookie headers, API keys, passwords, secrets and tokens,
// idempotency keys, request and response bodies and connection strings are replaced before the
// line is written, at any depth and whatever their case or separators (Authorization,
// set-cookie, api_key, IdempotencyKey). Callers log identifiers and counts; redaction is the
// second line of defence.
import pino, { type Logger } from 'pino';

/**
 * Field names whose values are never written, compared lower-case without '-' or '_', by how
 * the name ends: `authorization` covers proxy-authorization, `token` accessToken and
 * METRICS_TOKEN, `secret` AUTH_SECRET and fingerprintSecret, `databaseurl`
 * DASHBOARD_DATABASE_URL, `key` and `keys` apiKey, idempotency-key and encryptionKeys.
 */
export const REDACTED_ENDINGS = [
  'authorization',
  'cookie',
  'password',
  'passwordhash',
  'secret',
  'token',
  'key',
  'keys',
  'body',
  'databaseurl',
  'connectionstring',
];

const CENSOR = '[redacted]';
const MAX_DEPTH = 10;

export function isRedactedName(name: string): boolean {
  const normal = name.toLowerCase().replace(/[-_]/g, '');
  return REDACTED_ENDINGS.some((ending) => normal.endsWith(ending));
}

/**
 * A copy of `value` with every redacted name's value censored, at any depth (cycles cut). Header
 * lists as [name, value] pairs are censored by their name too; dates stay dates; bytes are never
 * written (they may be a key or a body).
 */
export function redact(value: unknown, depth = 0, seen = new WeakSet<object>()): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (value instanceof Date) return value;
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) return '[bytes]';
  if (seen.has(value) || depth >= MAX_DEPTH) return '[omitted]';
  seen.add(value);
  if (Array.isArray(value)) {
    if (value.length === 2 && typeof value[0] === 'string' && isRedactedName(value[0])) return [value[0], CENSOR];
    return value.map((item) => redact(item, depth + 1, seen));
  }
  // Errors keep pino's serializer (type, message, stack); their own fields are redacted too.
  const source = value instanceof Error ? { ...Object.fromEntries(Object.entries(value)), type: value.name, message: value.message, stack: value.stack } : value;
  const copy: Record<string, unknown> = {};
  for (const [name, item] of Object.entries(source)) copy[name] = isRedactedName(name) ? CENSOR : redact(item, depth + 1, seen);
  return copy;
}

export function createLogger(options: { level?: string; destination?: pino.DestinationStream } = {}): Logger {
  return pino(
    {
      level: options.level ?? process.env.LOG_LEVEL ?? 'info',
      base: undefined,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: {
        level: (label) => ({ level: label }),
        log: (object) => redact(object) as Record<string, unknown>,
      },
    },
    options.destination,
  );
}

export const logger = createLogger();

/** What is logged of an error: a database error's code and routine (its message may quote input), otherwise its name and message. */
export function describeError(error: unknown): Record<string, string> {
  if (!(error instanceof Error)) return { name: typeof error };
  const fields = error as Error & { code?: unknown; routine?: unknown; severity?: unknown };
  if (typeof fields.code === 'string' && /^[0-9A-Z]{5}$/.test(fields.code) && typeof fields.severity === 'string') {
    return { name: error.name, sqlstate: fields.code, ...(typeof fields.routine === 'string' ? { routine: fields.routine } : {}) };
  }
  return { name: error.name, message: error.message.slice(0, 300) };
}

/**
 * A pool's lost connection (db/client.ts's onConnectionLost) as a warning: the error described,
 * never its raw message (a database error's may quote a statement's input).
 */
export function logConnectionLost(error: Error, pool: string, log: Pick<Logger, 'warn'> = logger): void {
  log.warn({ pool, error: describeError(error) }, 'database connection lost');
}
