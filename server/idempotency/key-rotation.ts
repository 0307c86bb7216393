// Key rotation for stored responses: re-encrypts every body of one service sealed under an old
// key with the ring's current (first) key, so the old key can then be dropped from that
// service's RESPONSE_ENCRYPTION_KEYS. Each service has keys of its own: another service's rows
// are never opened, only counted apart. Runs beside live traffic: short chunks that skip locked rows.
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import { detectStoreLayout, type StoreLayout } from '../../db/migrate';
import { beginWithLockTimeout, transactionOn, type HeldConnection } from '../../db/transaction';
import { StoredResponseUnreadableError } from '@retrysafe/store';
import type { ResponseKeyRing } from '@retrysafe/store';
import type { Queryable } from '@retrysafe/store/postgres';

export interface RotationOptions {
  /** Rows locked and re-encrypted per chunk (one short transaction each). */
  chunkSize: number;
  /** A chunk waits at most this long for a table lock (a partition being dropped); the pass then ends early. */
  lockTimeoutMs: number;
  /** Pause between chunks, so live traffic keeps most of the database. */
  pauseMs: number;
  /** Stop after this many passes even if each one still rotated something (an instance still sealing with an old key). */
  maxPasses: number;
}

export const defaultRotationOptions: RotationOptions = { chunkSize: 500, lockTimeoutMs: 200, pauseMs: 10, maxPasses: 10 };

export interface KeyIdCount {
  keyId: string;
  rows: number;
}

export interface ServiceKeyIdCount extends KeyIdCount {
  service: string;
}

export interface RotationSummary {
  /** The service whose rows were rotated (the keys given are its keys). */
  service: string;
  /** The current key: every rotated row is now sealed under it. */
  keyId: string;
  rowsRotated: number;
  chunks: number;
  passes: number;
  /** Readable rows still under an old key (locked by in-flight work during the run): keep these keys and run again. */
  remainingOnOldKeys: KeyIdCount[];
  /** Rows that no configured key opens (unknown key id or failed authentication), left as they are. */
  unreadable: KeyIdCount[];
  /** True when no readable row is left on an old key: every key id other than `keyId` can be dropped from RESPONSE_ENCRYPTION_KEYS. */
  oldKeysDroppable: boolean;
  /** Other services' sealed rows on a key id other than `keyId`, by service and key id: theirs to rotate with their own keys, never opened here. */
  otherServices: ServiceKeyIdCount[];
  durationMs: number;
}

interface SealedRow {
  principal_id: string;
  service: string;
  scope: string;
  key: string;
  /** As text: a JS Date would drop the microseconds, and the partitioned cursor must match exactly. */
  expires_at: string;
  response_key_id: string;
  response_body: Buffer;
}

/** Where a pass resumes: the primary key of the last row the previous chunk returned. */
interface Cursor {
  principalId: string;
  service: string;
  scope: string;
  key: string;
  expiresAt: string;
}

// Sorts before every row: no row has an empty service or scope (the key table's checks), so a
// pass needs no separate "first chunk" statement.
const START: Cursor = { principalId: '00000000-0000-0000-0000-000000000000', service: '', scope: '', key: '', expiresAt: '-infinity' };

const LOCK_NOT_AVAILABLE = '55P03';

// The keyset is the layout's primary key, so each chunk is a range scan of it from the
// cursor. LIMIT applies after locking, so rows skipped as locked do not count. The ORDER BY
// names k.expires_at: unqualified it would mean the text output column.
const LOCK_CHUNK_SQL = `
SELECT k.principal_id, k.service, k.scope, k.key, k.expires_at::text AS expires_at, k.response_key_id, k.response_body
FROM idempotency_keys k
WHERE (k.principal_id, k.service, k.scope, k.key) > ($3::uuid, $4::text, $5::text, $6::text)
  AND k.service = $7 AND k.response_body IS NOT NULL AND k.response_key_id <> $1
ORDER BY k.principal_id, k.service, k.scope, k.key
LIMIT $2
FOR UPDATE SKIP LOCKED`;

const PARTITIONED_LOCK_CHUNK_SQL = `
SELECT k.principal_id, k.service, k.scope, k.key, k.expires_at::text AS expires_at, k.response_key_id, k.response_body
FROM idempotency_keys k
WHERE (k.principal_id, k.service, k.scope, k.key, k.expires_at) > ($3::uuid, $4::text, $5::text, $6::text, $8::timestamptz)
  AND k.service = $7 AND k.response_body IS NOT NULL AND k.response_key_id <> $1
ORDER BY k.principal_id, k.service, k.scope, k.key, k.expires_at
LIMIT $2
FOR UPDATE SKIP LOCKED`;

// Fenced on the key id and ciphertext that were read. The chunk holds the rows' locks, so
// this is the second line of defence: a completion or takeover is never overwritten.
const STORE_RESEALED_SQL = `
UPDATE idempotency_keys k SET response_body = u.new_body, response_key_id = $1
FROM unnest($2::uuid[], $3::text[], $4::text[], $5::timestamptz[], $6::text[], $7::bytea[], $8::bytea[])
  AS u(principal_id, scope, key, expires_at, old_key_id, old_body, new_body)
WHERE k.principal_id = u.principal_id AND k.service = $9 AND k.scope = u.scope AND k.key = u.key AND k.expires_at = u.expires_at
  AND k.response_key_id = u.old_key_id AND k.response_body = u.old_body`;

const COUNT_OLD_KEY_ROWS_SQL = `
SELECT service, response_key_id AS key_id, count(*)::int AS rows
FROM idempotency_keys
WHERE response_body IS NOT NULL AND response_key_id <> $1
GROUP BY service, response_key_id
ORDER BY service, response_key_id`;

/** The chunk statements' texts, for the test that proves their plans. */
export const rotationStatementTexts = { lockChunk: LOCK_CHUNK_SQL, partitionedLockChunk: PARTITIONED_LOCK_CHUNK_SQL };

/**
 * Locks the next rows after `cursor` that are sealed under another key than the current
 * one, skipping rows locked by in-flight work. Range scan of the primary key
 * (idempotency_keys_pkey; in the partitioned layout a merge of each partition's).
 */
async function lockOldKeyChunk(db: Queryable, layout: StoreLayout, service: string, currentKeyId: string, cursor: Cursor, limit: number): Promise<SealedRow[]> {
  const from = [cursor.principalId, cursor.service, cursor.scope, cursor.key, service];
  // Unnamed, so it is planned with its values every time: a generic plan cannot see the
  // LIMIT, assumes a tenth of the table, and prefers sorting a sequential scan.
  const { rows } = await db.query<SealedRow>(
    layout === 'partitioned'
      ? { text: PARTITIONED_LOCK_CHUNK_SQL, values: [currentKeyId, limit, ...from, cursor.expiresAt] }
      : { text: LOCK_CHUNK_SQL, values: [currentKeyId, limit, ...from] },
  );
  return rows;
}

interface Resealed {
  row: SealedRow;
  body: Buffer;
}

/**
 * Writes the re-sealed bodies; returns how many rows changed. One index probe per row (the
 * primary key, or expires_at when the planner finds it as selective).
 */
async function storeResealed(db: Queryable, service: string, currentKeyId: string, resealed: Resealed[]): Promise<number> {
  const result = await db.query({
    name: 'retrysafe_rotation_store_resealed',
    text: STORE_RESEALED_SQL,
    values: [
      currentKeyId,
      resealed.map(({ row }) => row.principal_id),
      resealed.map(({ row }) => row.scope),
      resealed.map(({ row }) => row.key),
      resealed.map(({ row }) => row.expires_at),
      resealed.map(({ row }) => row.response_key_id),
      resealed.map(({ row }) => row.response_body),
      resealed.map(({ body }) => body),
      service,
    ],
  });
  return result.rowCount ?? 0;
}

/** Rows per service and old key id. No index serves it (a sequential scan), once at the end of a run. */
async function countOldKeyRows(db: pg.ClientBase, currentKeyId: string): Promise<{ service: string; key_id: string; rows: number }[]> {
  const { rows } = await db.query<{ service: string; key_id: string; rows: number }>(COUNT_OLD_KEY_ROWS_SQL, [currentKeyId]);
  return rows;
}

interface ChunkResult {
  /** Rows the chunk locked (rotated or unreadable); fewer than the chunk size means the pass reached the end. */
  seen: number;
  rotated: number;
  last: Cursor | undefined;
}

/** One chunk in its own transaction: lock, open with the old key, seal with the current one, write back. */
async function rotateChunk(
  held: HeldConnection,
  keyRing: ResponseKeyRing,
  layout: StoreLayout,
  service: string,
  cursor: Cursor,
  options: RotationOptions,
  unreadable: Map<string, number>,
): Promise<ChunkResult> {
  return transactionOn(
    held,
    async (client) => {
      const rows = await lockOldKeyChunk(client, layout, service, keyRing.currentKeyId, cursor, options.chunkSize);
      const resealed: Resealed[] = [];
      for (const row of rows) {
        const identity = { principalId: row.principal_id, service: row.service, scope: row.scope, key: row.key };
        try {
          const plaintext = keyRing.open({ keyId: row.response_key_id, ciphertext: row.response_body }, identity);
          resealed.push({ row, body: keyRing.seal(plaintext, identity).ciphertext });
        } catch (error) {
          if (!(error instanceof StoredResponseUnreadableError)) throw error;
          unreadable.set(row.response_key_id, (unreadable.get(row.response_key_id) ?? 0) + 1);
        }
      }
      const rotated = resealed.length > 0 ? await storeResealed(client, service, keyRing.currentKeyId, resealed) : 0;
      const last = rows.at(-1);
      return {
        seen: rows.length,
        rotated,
        last: last && { principalId: last.principal_id, service: last.service, scope: last.scope, key: last.key, expiresAt: last.expires_at },
      };
    },
    beginWithLockTimeout(options.lockTimeoutMs),
  );
}

interface PassResult {
  rotated: number;
  chunks: number;
  unreadable: Map<string, number>;
}

/** One walk over the whole table; a chunk that times out on a lock ends it early (the next pass retries). */
async function rotationPass(held: HeldConnection, keyRing: ResponseKeyRing, layout: StoreLayout, service: string, options: RotationOptions): Promise<PassResult> {
  const pass: PassResult = { rotated: 0, chunks: 0, unreadable: new Map() };
  let cursor = START;
  for (;;) {
    let chunk: ChunkResult;
    try {
      chunk = await rotateChunk(held, keyRing, layout, service, cursor, options, pass.unreadable);
    } catch (error) {
      if ((error as { code?: unknown }).code === LOCK_NOT_AVAILABLE) return pass;
      throw error;
    }
    pass.chunks += 1;
    pass.rotated += chunk.rotated;
    if (!chunk.last || chunk.seen < options.chunkSize) return pass;
    cursor = chunk.last;
    await sleep(options.pauseMs);
  }
}

const toCounts = (counts: Map<string, number>): KeyIdCount[] =>
  [...counts].filter(([, rows]) => rows > 0).map(([keyId, rows]) => ({ keyId, rows })).sort((a, b) => a.keyId.localeCompare(b.keyId));

/**
 * Re-encrypts every stored body of `service` that is not under the ring's current key (the ring
 * holds that service's keys). Passes repeat while they make progress (rows skipped as locked are
 * retried by the next pass); what is still on an old key at the end is counted and reported,
 * never waited for, and other services' rows on other keys are reported apart.
 */
export async function rotateResponseKeys(pool: pg.Pool, keyRing: ResponseKeyRing, service: string, overrides: Partial<RotationOptions> = {}): Promise<RotationSummary> {
  const options = { ...defaultRotationOptions, ...overrides };
  const started = performance.now();
  const client = await pool.connect();
  const held: HeldConnection = { client };
  let failed: Error | undefined;
  try {
    const layout = await detectStoreLayout(client);
    let rowsRotated = 0;
    let chunks = 0;
    let passes = 0;
    let unreadable = new Map<string, number>();
    while (passes < options.maxPasses) {
      const pass = await rotationPass(held, keyRing, layout, service, options);
      passes += 1;
      rowsRotated += pass.rotated;
      chunks += pass.chunks;
      // Each pass meets every unreadable row it can lock again: the last one is the current picture.
      unreadable = pass.unreadable;
      if (pass.rotated === 0) break;
    }
    const left = await countOldKeyRows(client, keyRing.currentKeyId);
    const remaining = new Map(left.filter((row) => row.service === service).map((row) => [row.key_id, row.rows - (unreadable.get(row.key_id) ?? 0)]));
    const remainingOnOldKeys = toCounts(remaining);
    return {
      service,
      keyId: keyRing.currentKeyId,
      rowsRotated,
      chunks,
      passes,
      remainingOnOldKeys,
      unreadable: toCounts(unreadable),
      oldKeysDroppable: remainingOnOldKeys.length === 0,
      otherServices: left.filter((row) => row.service !== service).map((row) => ({ service: row.service, keyId: row.key_id, rows: row.rows })),
      durationMs: Math.round(performance.now() - started),
    };
  } catch (error) {
    failed = error instanceof Error ? error : new Error(String(error));
    throw error;
  } finally {
    // A connection that failed mid-chunk may still be in a transaction: discard it.
    client.release(failed ?? held.broken);
  }
}
