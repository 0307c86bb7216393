// The dashboard's reads of key records kept in MySQL/MariaDB (KeyRecordReads), on a read-only
// MySQL user whose column privileges exclude response_body (mysqlDashboardGrants): if a dashboard
// bug named the body, the server itself would refuse (ER_COLUMNACCESS_DENIED_ERROR). Each
// statement names its columns and walks one index, bounded: a lookup probes the primary key once
// per (service, scope) the Postgres policies know, a principal's list walks
// (principal_id, created_at) backwards from its cursor at most KEY_LIST_SCAN_ROWS rows, stale claims
// walk (state, lease_expires_at) (mysql-migrations/0003), a correlation id (correlation_id)
// (mysql-migrations/0004). Times are the server's UTC_TIMESTAMP(6).
// Not answered here: a release of a stale claim (the dashboard's user writes nothing; the
// service's sweep releases stale claims).
import type { RowDataPacket } from 'mysql2/promise';
import {
  KEY_LIST_SCAN_ROWS,
  KeyReadUnsupportedError,
  type CorrelationRecord,
  type KeyCursor,
  type KeyListQuery,
  type KeyLookupQuery,
  type KeyPage,
  type KeyRecord,
  type KeyRecordReads,
  type KeyState,
  type StaleClaim,
  type StaleClaimRelease,
} from './key-reads.js';
import { knownScopes } from './key-scopes.js';
import { MYSQL_KEY_TABLE, type MysqlQueryable } from './mysql-statements.js';
import type { Queryable } from './statements.js';
import { isTransientMysqlFailure } from './mysql.js';
import { databaseUnavailableReason, type UnavailableReason } from './unavailable.js';

/**
 * The key table's columns the dashboard's MySQL user may select: every one but response_body.
 * The dashboard's statements name no other (a test greps them), and the grant gives no other.
 */
export const MYSQL_DASHBOARD_COLUMNS = [
  'principal_id',
  'service',
  'scope',
  'idempotency_key',
  'state',
  'fingerprint',
  'correlation_id',
  'attempts',
  'lease_expires_at',
  'created_at',
  'completed_at',
  'expires_at',
  'response_status',
  'response_content_type',
  'response_key_id',
  'response_size',
  'response_ref',
] as const;

const quoteName = (name: string) => `\`${name.replaceAll('`', '``')}\``;
const quoteText = (text: string) => `'${text.replaceAll('\\', '\\\\').replaceAll("'", "''")}'`;

/**
 * The statements that give a MySQL/MariaDB user the dashboard's reads and nothing more: SELECT on
 * the key table's metadata columns (never response_body), in `database`. Run them as an
 * administrator after `CREATE USER`; docs/mysql.md shows the whole script.
 */
export function mysqlDashboardGrants(grantee: { user: string; host: string }, database: string): string[] {
  return [`GRANT SELECT (${MYSQL_DASHBOARD_COLUMNS.join(', ')}) ON ${quoteName(database)}.${MYSQL_KEY_TABLE} TO ${quoteText(grantee.user)}@${quoteText(grantee.host)}`];
}

/** ER_COLUMNACCESS_DENIED_ERROR: a statement named a column the user has no privilege on. */
export const ER_COLUMNACCESS_DENIED = 1143;
/** ER_TABLEACCESS_DENIED_ERROR: the user has no privilege on the table at all. */
export const ER_TABLEACCESS_DENIED = 1142;

/**
 * What the dashboard's MySQL user may do with the key table: 'metadata' (the dashboard's columns,
 * not response_body: as it must be), 'bodies' (it may read response bodies: refuse it), or 'none'
 * (no SELECT on the metadata either). Asked of the server itself, by trying.
 */
export async function mysqlReaderAccess(db: MysqlQueryable): Promise<'metadata' | 'bodies' | 'none'> {
  const attempt = async (columns: string): Promise<number | null> => {
    try {
      await db.query(`SELECT ${columns} FROM ${MYSQL_KEY_TABLE} LIMIT 0`);
      return null;
    } catch (error) {
      const errno = (error as { errno?: unknown }).errno;
      if (errno === ER_COLUMNACCESS_DENIED || errno === ER_TABLEACCESS_DENIED) return errno;
      throw error;
    }
  };
  if ((await attempt(MYSQL_DASHBOARD_COLUMNS.join(', '))) !== null) return 'none';
  return (await attempt('response_body')) === null ? 'bodies' : 'metadata';
}

/** ER_KEY_DOES_NOT_EXITS: a FORCE INDEX named an index the table does not have (migration 0003 or 0004 not applied). */
export const ER_KEY_DOES_NOT_EXIST = 1176;

/** The indexes the dashboard's reads force (mysql-migrations/0003_dashboard_reads, 0004_correlation_lookup). */
export const MYSQL_DASHBOARD_INDEXES = ['retrysafe_idempotency_keys_principal_created', 'retrysafe_idempotency_keys_state_lease', 'retrysafe_idempotency_keys_correlation'] as const;

/**
 * Which of MYSQL_DASHBOARD_INDEXES the key table lacks (migration 0003 or 0004 not applied), asked by
 * trying each as the reads do (FORCE INDEX, no row read): the dashboard's user may not read the
 * migration journal.
 */
export async function mysqlMissingDashboardIndexes(db: MysqlQueryable): Promise<string[]> {
  const missing: string[] = [];
  for (const index of MYSQL_DASHBOARD_INDEXES) {
    try {
      await db.query(`SELECT principal_id FROM ${MYSQL_KEY_TABLE} FORCE INDEX (${index}) LIMIT 0`);
    } catch (error) {
      if ((error as { errno?: unknown }).errno !== ER_KEY_DOES_NOT_EXIST) throw error;
      missing.push(index);
    }
  }
  return missing;
}

const micros = (column: string) => `CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ${column}) AS CHAR)`;
const seconds = (from: string, to: string) => `TIMESTAMPDIFF(MICROSECOND, ${from}, ${to}) / 1000000`;

/** A lookup's metadata columns: never response_body. */
const RECORD_COLUMNS = `service, scope, state, response_status, response_content_type, response_size,
  CASE WHEN response_ref IS NOT NULL THEN 'reference' WHEN response_key_id IS NOT NULL THEN 'body' END AS stored_as,
  correlation_id, created_at, completed_at, expires_at,
  GREATEST(0, ${seconds('UTC_TIMESTAMP(6)', 'expires_at')}) AS seconds_left,
  lease_expires_at,
  CASE WHEN state = 'in_progress' AND lease_expires_at < UTC_TIMESTAMP(6) THEN ${seconds('lease_expires_at', 'UTC_TIMESTAMP(6)')} END AS lease_passed_seconds,
  LOWER(HEX(SUBSTRING(fingerprint, 1, 4))) AS fingerprint_prefix, attempts`;

/** A key lookup: one primary-key probe per (service, scope), as on Postgres. `pairs`: how many (service, scope) pairs. */
function keyRecordsSql(pairs: number): string {
  const probes = Array.from({ length: pairs }, () => '(service = ? AND scope = ?)').join(' OR ');
  return `SELECT ${RECORD_COLUMNS} FROM ${MYSQL_KEY_TABLE}
    WHERE principal_id = ? AND idempotency_key = ? AND (${probes})
    ORDER BY service, scope, expires_at DESC`;
}

/** Rows with one correlation id are at most a handful (a replay and a takeover keep it); this caps a pathological table, as on Postgres. */
const MAX_CORRELATION_RECORDS = 20;

/**
 * The keys of a correlation id, newest first: an equality range of
 * retrysafe_idempotency_keys_correlation (mysql-migrations/0004), then its few rows sorted.
 */
const CORRELATION_RECORDS_SQL = `SELECT principal_id, idempotency_key, ${RECORD_COLUMNS}
    FROM ${MYSQL_KEY_TABLE} FORCE INDEX (retrysafe_idempotency_keys_correlation)
    WHERE correlation_id = ?
    ORDER BY created_at DESC LIMIT ${MAX_CORRELATION_RECORDS}`;

/** Stale claims, oldest lease first: a range of retrysafe_idempotency_keys_state_lease. */
function staleClaimsSql(service: boolean): string {
  return `SELECT principal_id, service, scope, idempotency_key, created_at, lease_expires_at, ${seconds('lease_expires_at', 'UTC_TIMESTAMP(6)')} AS past, attempts, correlation_id
    FROM ${MYSQL_KEY_TABLE} FORCE INDEX (retrysafe_idempotency_keys_state_lease)
    WHERE state = 'in_progress' AND lease_expires_at < UTC_TIMESTAMP(6)${service ? ' AND service = ?' : ''}
    ORDER BY lease_expires_at LIMIT ?`;
}

/**
 * A page of a principal's keys, in one pass in index order as on Postgres (principalKeysStatement):
 * the scan walks retrysafe_idempotency_keys_principal_created backwards from the cursor, at most
 * KEY_LIST_SCAN_ROWS rows numbered as they come; the outer query keeps the matches and the row at
 * the bound, and stops at one match more than the page.
 */
export function mysqlPrincipalKeysStatement(query: KeyListQuery): { sql: string; values: unknown[] } {
  const order = 'created_at DESC, service DESC, scope DESC, idempotency_key DESC';
  const filters = ['expires_at > UTC_TIMESTAMP(6)'];
  const filterValues: unknown[] = [];
  for (const [column, value] of [['service', query.service], ['scope', query.scope], ['state', query.state]] as const) {
    if (value !== undefined) {
      filters.push(`${column} = ?`);
      filterValues.push(value);
    }
  }
  const scan = ['principal_id = ?'];
  const scanValues: unknown[] = [query.principalId];
  if (query.after !== undefined) {
    // The range bound first (the index serves created_at <= ...), then the exact keyset order.
    const at = "TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00')";
    scan.push(`created_at <= ${at}`, `(created_at < ${at} OR (service, scope, idempotency_key) < (?, ?, ?))`);
    const { createdAtMicros, service, scope, key } = query.after;
    scanValues.push(Number(createdAtMicros), Number(createdAtMicros), service, scope, key);
  }
  return {
    sql: `SELECT service, scope, idempotency_key, state, response_status, created_at, created_micros, expires_at, matches, n = ? AS at_bound
      FROM (
        SELECT scanned.*, (${filters.join(' AND ')}) AS matches, ROW_NUMBER() OVER (ORDER BY ${order}) AS n
        FROM (
          SELECT service, scope, idempotency_key, state, response_status, created_at, ${micros('created_at')} AS created_micros, expires_at
          FROM ${MYSQL_KEY_TABLE} FORCE INDEX (retrysafe_idempotency_keys_principal_created)
          WHERE ${scan.join(' AND ')}
          ORDER BY ${order} LIMIT ?
        ) scanned
      ) numbered
      WHERE matches OR n = ?
      ORDER BY ${order} LIMIT ?`,
    values: [KEY_LIST_SCAN_ROWS, ...filterValues, ...scanValues, KEY_LIST_SCAN_ROWS, KEY_LIST_SCAN_ROWS, query.limit + 1],
  };
}

/** The key table's size as InnoDB's statistics keep it (estimates: no row is counted). */
const TABLE_FIGURES_SQL = `SELECT TABLE_ROWS AS estimated_rows, DATA_LENGTH AS data_bytes, INDEX_LENGTH AS index_bytes FROM information_schema.TABLES
  WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '${MYSQL_KEY_TABLE}'`;
/** The row that expires first: the first entry of retrysafe_idempotency_keys_expires_at. */
const OLDEST_ROW_SQL = `SELECT ${seconds('created_at', 'UTC_TIMESTAMP(6)')} AS age, ${seconds('expires_at', 'UTC_TIMESTAMP(6)')} AS lag
  FROM ${MYSQL_KEY_TABLE} FORCE INDEX (retrysafe_idempotency_keys_expires_at) ORDER BY expires_at LIMIT 1`;

/** What the overview shows of a MySQL key table (MysqlKeyReads.storeFigures): the figures Postgres's store panels show of its own. */
export interface MysqlStoreFigures {
  /** InnoDB's estimate (information_schema.TABLES), every service's rows in the table. */
  estimatedRows: number;
  dataBytes: number;
  indexBytes: number;
  /** Age of the row that expires first, seconds; null when the table is empty. */
  oldestRowAgeSeconds: number | null;
  /** How far past its expiry the row that expires first is, seconds (0 when none has expired). */
  cleanupLagSeconds: number;
}

/** The SQL texts the dashboard sends to MySQL, for the test that proves none names response_body. */
export const mysqlKeyReadStatementTexts = (): string[] => [
  keyRecordsSql(2),
  staleClaimsSql(true),
  CORRELATION_RECORDS_SQL,
  mysqlPrincipalKeysStatement({ principalId: '', limit: 1, service: 's', scope: 's', state: 'completed', after: { createdAtMicros: '1', service: 's', scope: 's', key: 'k' } }).sql,
  TABLE_FIGURES_SQL,
  OLDEST_ROW_SQL,
];

const text = (value: unknown): string => (Buffer.isBuffer(value) ? value.toString('utf8') : String(value));
const numberOrNull = (value: unknown): number | null => (value === null || value === undefined ? null : Number(value));
const isoOrNull = (value: unknown): string | null => (value instanceof Date ? value.toISOString() : null);
const iso = (value: unknown): string => {
  if (!(value instanceof Date)) throw new Error('a MySQL DATETIME did not come back as a Date (a pool without MYSQL_POOL_SETTINGS?)');
  return value.toISOString();
};

type Row = RowDataPacket & Record<string, unknown>;

/** A row of RECORD_COLUMNS as the seam's record. */
function toKeyRecord(row: Row): KeyRecord {
  const attempts = Number(row.attempts);
  return {
    service: text(row.service),
    scope: text(row.scope),
    state: text(row.state) as KeyState,
    statusCode: numberOrNull(row.response_status),
    contentType: row.response_content_type === null ? null : text(row.response_content_type),
    responseSize: numberOrNull(row.response_size),
    storedAs: row.stored_as === null ? null : (text(row.stored_as) as 'body' | 'reference'),
    correlationId: text(row.correlation_id),
    createdAt: iso(row.created_at),
    completedAt: isoOrNull(row.completed_at),
    expiresAt: iso(row.expires_at),
    secondsLeft: Math.round(Number(row.seconds_left)),
    leaseExpiresAt: isoOrNull(row.lease_expires_at),
    leasePassedSeconds: numberOrNull(row.lease_passed_seconds),
    fingerprintPrefix: text(row.fingerprint_prefix),
    attempts,
    takeovers: Math.max(0, attempts - 1),
  };
}

/** How long a dashboard read waits for MySQL before it answers unavailable (503), by default (mysql2's query timeout). */
export const MYSQL_KEY_READ_TIMEOUT_MS = 5_000;

/**
 * MySQL could not answer the dashboard's read now: the connection was refused, lost or timed out
 * (mysql2's query timeout), the server is shutting down or has too many connections. The HTTP
 * layer answers 503 with Retry-After (isDatabaseUnavailable reads unavailableReason).
 */
export class MysqlUnavailableError extends Error {
  readonly code = 'MYSQL_UNAVAILABLE';
  constructor(
    readonly unavailableReason: UnavailableReason,
    cause: unknown,
  ) {
    super(`MySQL is unavailable (${unavailableReason}): ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'MysqlUnavailableError';
  }
}

/**
 * `error` as MysqlUnavailableError when it says MySQL cannot answer now, for the reason
 * databaseUnavailableReason gives every backend's errors (errno 1040 too many connections, a
 * shutdown, a lost or refused connection, mysql2's query timeout), or any other failure
 * isTransientMysqlFailure counts (mysql2's fatal errors: the connection is gone); else itself.
 */
export function mysqlUnavailable(error: unknown): unknown {
  if (error instanceof MysqlUnavailableError) return error;
  const reason = databaseUnavailableReason(error) ?? (isTransientMysqlFailure(error) ? 'connection' : null);
  return reason === null ? error : new MysqlUnavailableError(reason, error);
}

/**
 * MySQL/MariaDB: the statements above on `mysql` (the dashboard's read-only user's pool, opened
 * with MYSQL_POOL_SETTINGS so DATETIMEs read as UTC), and `db` the Postgres holding the policies
 * (the scopes a key may be stored under).
 */
export class MysqlKeyReads implements KeyRecordReads {
  private readonly timeoutMs: number;

  constructor(
    private readonly mysql: MysqlQueryable,
    private readonly db: Queryable,
    options: { timeoutMs?: number } = {},
  ) {
    this.timeoutMs = options.timeoutMs ?? MYSQL_KEY_READ_TIMEOUT_MS;
  }

  /**
   * One statement, bounded by timeoutMs, the wait for a pooled connection included (mysql2's query
   * timeout leaves the connection busy until the server answers, so a hung server would hold the
   * pool's every connection); a failure that says MySQL cannot answer now is a MysqlUnavailableError.
   */
  private async rows(sql: string, values: unknown[]): Promise<Row[]> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new MysqlUnavailableError('timeout', new Error(`no answer in ${this.timeoutMs} ms`))), this.timeoutMs);
    });
    try {
      const [rows] = await Promise.race([this.mysql.query<Row[]>({ sql, values, timeout: this.timeoutMs }), timeout]);
      return rows;
    } catch (error) {
      throw mysqlUnavailable(error);
    } finally {
      clearTimeout(timer);
    }
  }

  async keyRecords(query: KeyLookupQuery): Promise<KeyRecord[]> {
    const scopes = await knownScopes(this.db, query.service);
    if (scopes.length === 0) return [];
    const rows = await this.rows(keyRecordsSql(scopes.length), [query.principalId, query.key, ...scopes.flatMap((pair) => [pair.service, pair.scope])]);
    return rows.map(toKeyRecord);
  }

  async principalKeys(query: KeyListQuery): Promise<KeyPage> {
    const statement = mysqlPrincipalKeysStatement(query);
    const rows = await this.rows(statement.sql, statement.values);
    const cursorOf = (row: Row): KeyCursor => ({ createdAtMicros: text(row.created_micros), service: text(row.service), scope: text(row.scope), key: text(row.idempotency_key) });
    const matches = rows.filter((row) => Number(row.matches) === 1);
    const page = matches.slice(0, query.limit);
    const last = page.at(-1);
    const bound = rows.find((row) => Number(row.at_bound) === 1);
    let next: KeyCursor | null = null;
    let searchedBackTo: string | null = null;
    if (matches.length > query.limit && last) next = cursorOf(last);
    else if (bound) {
      next = cursorOf(bound);
      if (page.length < query.limit) searchedBackTo = iso(bound.created_at);
    }
    return {
      keys: page.map((row) => ({
        service: text(row.service),
        scope: text(row.scope),
        key: text(row.idempotency_key),
        state: text(row.state) as KeyState,
        statusCode: numberOrNull(row.response_status),
        createdAt: iso(row.created_at),
        expiresAt: iso(row.expires_at),
      })),
      next,
      searchedBackTo,
    };
  }

  /**
   * The keys whose claim had this id (CORRELATION_RECORDS_SQL: the correlation index), with their
   * principals' names from Postgres (principal_names' primary key): at most 20 rows.
   */
  async correlationRecords(correlationId: string): Promise<CorrelationRecord[]> {
    const rows = await this.rows(CORRELATION_RECORDS_SQL, [correlationId]);
    if (rows.length === 0) return [];
    const principals = [...new Set(rows.map((row) => text(row.principal_id)))];
    const { rows: names } = await this.db.query<{ principal_id: string; name: string }>({
      text: 'SELECT principal_id::text AS principal_id, name FROM retrysafe.principal_names WHERE principal_id = ANY($1::uuid[])',
      values: [principals],
    });
    const nameOf = new Map(names.map((row) => [row.principal_id, row.name]));
    return rows.map((row) => {
      const principalId = text(row.principal_id);
      return { principalId, principalName: nameOf.get(principalId) ?? null, key: text(row.idempotency_key), ...toKeyRecord(row) };
    });
  }

  async staleClaims(limit: number, service?: string): Promise<StaleClaim[]> {
    const rows = await this.rows(staleClaimsSql(service !== undefined), service !== undefined ? [service, limit] : [limit]);
    return rows.map((row) => ({
      principalId: text(row.principal_id),
      service: text(row.service),
      scope: text(row.scope),
      key: text(row.idempotency_key),
      createdAt: iso(row.created_at),
      leaseExpiredAt: iso(row.lease_expires_at),
      pastLeaseSeconds: Math.round(Number(row.past)),
      attempts: Number(row.attempts),
      correlationId: text(row.correlation_id),
    }));
  }

  /** The key table's size (catalog estimates) and its oldest row (through the expiry index): no full scan. */
  async storeFigures(): Promise<MysqlStoreFigures> {
    const [table, oldest] = await Promise.all([this.rows(TABLE_FIGURES_SQL, []), this.rows(OLDEST_ROW_SQL, [])]);
    const size = table[0];
    return {
      estimatedRows: Number(size?.estimated_rows ?? 0),
      dataBytes: Number(size?.data_bytes ?? 0),
      indexBytes: Number(size?.index_bytes ?? 0),
      oldestRowAgeSeconds: oldest[0] ? Number(oldest[0].age) : null,
      cleanupLagSeconds: oldest[0] ? Math.max(0, Number(oldest[0].lag)) : 0,
    };
  }

  /** The dashboard's MySQL user writes nothing: the service's own sweep (mysql-retention.ts) releases stale claims. */
  releaseStaleClaim(): Promise<StaleClaimRelease> {
    return Promise.reject(new KeyReadUnsupportedError("A stale claim of a MySQL-backed service is released by the service's own sweep (or taken over by the next retry), not from the dashboard"));
  }
}
