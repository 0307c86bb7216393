// Which failures mean "the database cannot be reached or cannot take work right now": a
// connection refused or cut, the server shutting down or starting up, too many connections, a
// full disk, a timeout (connecting, waiting for a pooled connection, a statement or a read), or
// a transaction the database rolled back whole to break a deadlock. The HTTP layer answers these
// 503 with Retry-After instead of 500: the request did not run to an outcome, and a retry with
// the same key is safe and will probably work soon.

/** Seconds a client should wait before retrying while the database is unavailable. */
export const UNAVAILABLE_RETRY_AFTER_SECONDS = 2;

/** Socket errors (Node's `code`) of a connection that could not be made or was cut. */
const SOCKET_CODES: ReadonlySet<string> = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN']);

/**
 * SQLSTATEs of a server that cannot serve: class 08 (connection exception), 57P01-57P03
 * (admin or crash shutdown, cannot connect now), 53100 (disk full), 53300 (too many
 * connections). 57014 (query_canceled) only when a timeout cancelled it, see below. 08P01 is
 * what PgBouncer sends for its own failures (server connection lost or not to be had, a
 * query_wait_timeout, shutting down): the pooler's way of saying the database is unreachable.
 */
const SQLSTATES: ReadonlySet<string> = new Set(['08000', '08001', '08003', '08004', '08006', '08P01', '57P01', '57P02', '57P03', '53100', '53300']);

/**
 * node-postgres raises these without a code: a connection or pool-checkout timeout, a
 * client-side query_timeout, and a connection that ended under a query.
 */
const CLIENT_MESSAGES: readonly RegExp[] = [
  /^timeout exceeded when trying to connect$/,
  /^Connection terminated due to connection timeout$/,
  /^Query read timeout$/,
  /^Connection terminated( unexpectedly)?$/,
  /^Client has encountered a connection error and is not queryable$/,
  /^Client was closed and is not queryable$/,
];

/**
 * `rollback`: the database rolled the request's transaction back whole to break a deadlock or a
 * serialization conflict (Postgres 40P01, 40001; MySQL/MariaDB 1213), so nothing of it was kept:
 * a retry with the same key runs it again. (A claim that loses a deadlock on its own key is a 409,
 * decided by the store before this.)
 */
export type UnavailableReason = 'connection' | 'shutdown' | 'capacity' | 'timeout' | 'rollback';

/**
 * MySQL/MariaDB server errors (mysql2's `errno`) that mean the same: too many connections, a
 * shutdown, a killed or lost connection, a deadlock's rollback. A lock wait timeout (1205) is not
 * one: it undoes the statement alone, and the transaction goes on.
 */
const MYSQL_ERRNOS: ReadonlyMap<number, UnavailableReason> = new Map([
  [1040, 'capacity'],
  [1053, 'shutdown'],
  [1213, 'rollback'],
  [1927, 'connection'],
  [2006, 'connection'],
  [2013, 'connection'],
]);

/** mysql2's own codes for a connection lost under a statement, and its query timeout. */
const MYSQL_CLIENT_CODES: ReadonlyMap<string, UnavailableReason> = new Map([
  ['PROTOCOL_CONNECTION_LOST', 'connection'],
  ['PROTOCOL_SEQUENCE_TIMEOUT', 'timeout'],
]);

/** Why the database is unavailable, or null when the error says something else (a bug, a constraint). */
export function databaseUnavailableReason(error: unknown): UnavailableReason | null {
  if (typeof error !== 'object' || error === null) return null;
  // Another backend's own verdict (RedisUnavailableError: a lost connection, OOM under noeviction, LOADING).
  const stated: unknown = (error as { unavailableReason?: unknown }).unavailableReason;
  if (stated === 'connection' || stated === 'shutdown' || stated === 'capacity' || stated === 'timeout' || stated === 'rollback') return stated;
  const code: unknown = (error as { code?: unknown }).code;
  // A MySQL/MariaDB server's error carries its number and SQLSTATE (mysql2); Postgres's carry no errno.
  const { errno, sqlState } = error as { errno?: unknown; sqlState?: unknown };
  if (typeof errno === 'number' && typeof sqlState === 'string') return MYSQL_ERRNOS.get(errno) ?? null;
  if (typeof code === 'string' && MYSQL_CLIENT_CODES.has(code)) return MYSQL_CLIENT_CODES.get(code) ?? null;
  if (code === '40P01' || code === '40001') return 'rollback';
  if (typeof code === 'string') {
    if (SOCKET_CODES.has(code)) return code === 'ETIMEDOUT' ? 'timeout' : 'connection';
    if (code.startsWith('08') && SQLSTATES.has(code)) return 'connection';
    if (!SQLSTATES.has(code) && code !== '57014') return null;
    if (code === '57P01' || code === '57P02' || code === '57P03') return 'shutdown';
    if (code === '53100' || code === '53300') return 'capacity';
    // query_canceled is also an operator's pg_cancel_backend; only a timeout is unavailability.
    if (code === '57014') return /due to statement timeout/.test(messageOf(error)) ? 'timeout' : null;
  }
  // AggregateError: Node's happy-eyeballs connect tried several addresses and all failed.
  const errors: unknown = (error as { errors?: unknown }).errors;
  if (Array.isArray(errors) && errors.length > 0 && errors.every((inner) => databaseUnavailableReason(inner) !== null)) return 'connection';
  const message = messageOf(error);
  if (code === undefined && CLIENT_MESSAGES.some((pattern) => pattern.test(message))) return /timeout/.test(message) ? 'timeout' : 'connection';
  return null;
}

export function isDatabaseUnavailable(error: unknown): boolean {
  return databaseUnavailableReason(error) !== null;
}

function messageOf(error: object): string {
  const message: unknown = (error as { message?: unknown }).message;
  return typeof message === 'string' ? message : '';
}
