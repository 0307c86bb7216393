// Partition maintenance for the partitioned layout: day partitions by expires_at are
// created ahead (retrysafe_ensure_partitions, beyond the longest retention) and dropped
// whole once their upper bound has passed, since every row in them is then past its
// expiry. Detached CONCURRENTLY first, so live claims never wait on the drop; the
// evidence (rows and youngest age per scope) is read from the detached table.
import type pg from 'pg';

/**
 * The partitions' width: a UTC day (retrysafe_ensure_partitions). A key promised less than this
 * would wait up to a day past its expiry for its partition's drop, more than its own retention:
 * the sweeper deletes such keys within a sweep of their expiry instead (sweeper.ts,
 * sweepShortPromises). A key promised this long or longer leaves with its partition.
 */
export const PARTITION_SECONDS = 86_400;

/**
 * True where a policy promises less than `$1` seconds (PARTITION_SECONDS), in force or as a
 * service's code declares it (which a service runs with until its policy is reviewed): the
 * sweeper walks for such keys (sweeper.ts) and the cleanup lag counts the walk's (key-table-expiry.ts).
 */
export const SHORT_POLICY_CONDITION = `(EXISTS (SELECT 1 FROM endpoint_policies WHERE retention_seconds < $1)
    OR EXISTS (SELECT 1 FROM endpoint_policy_declarations WHERE retention_seconds < $1))`;

export interface PartitionInfo {
  name: string;
  lowerBound: Date;
  upperBound: Date;
  /** A DETACH CONCURRENTLY that was interrupted; finished with FINALIZE. */
  detachPending: boolean;
}

export interface DroppedPartition {
  name: string;
  rows: number;
  scopes: { service: string; scope: string; rows: number; minAgeSeconds: number; maxPastExpirySeconds: number }[];
  detachMs: number;
  dropMs: number;
}

/** Creates the missing partitions ahead (a no-op in the plain layout); returns how many. */
export async function ensurePartitions(db: Pick<pg.ClientBase, 'query'>): Promise<number> {
  const { rows } = await db.query<{ created: number }>('SELECT retrysafe_ensure_partitions() AS created');
  return rows[0]?.created ?? 0;
}

/** The day partitions of idempotency_keys with their bounds (catalog only). */
export async function listPartitions(db: Pick<pg.ClientBase, 'query'>): Promise<PartitionInfo[]> {
  const { rows } = await db.query<{ name: string; bound: string; detach_pending: boolean }>(
    `SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound, i.inhdetachpending AS detach_pending
     FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'idempotency_keys'::regclass
     ORDER BY c.relname`,
  );
  return rows.flatMap((row) => {
    const match = /FROM \('([^']+)'\) TO \('([^']+)'\)/.exec(row.bound);
    return match?.[1] && match[2] ? [{ name: row.name, lowerBound: new Date(match[1]), upperBound: new Date(match[2]), detachPending: row.detach_pending }] : [];
  });
}

/**
 * A partition's detach waited longer than its budget for the transactions that held the key table
 * when it began (a long pg_dump, a session idle in transaction). The partition is left detach-
 * pending: no new query sees it, and the next run finishes the detach (FINALIZE) and drops it.
 */
export class DetachWaiting extends Error {
  constructor(readonly partition: string, readonly waitedMs: number) {
    super(
      `the drop of partition ${partition} waited over ${Math.round(waitedMs / 1000)} s for transactions older than it to end (see pg_stat_activity: a long pg_dump, a session idle in transaction); its detach is pending and the next run finishes it`,
    );
    this.name = 'DetachWaiting';
  }
}

/**
 * Drops every partition whose upper bound passed more than `safetyMs` ago. Runs outside
 * any transaction (DETACH ... CONCURRENTLY requires it) on the sweeper's own connection.
 * The DROP runs in a transaction with `recorded` (the sweeper's evidence of the partition's
 * rows), so a partition is never gone without its record. The detach waits for every
 * transaction holding the key table when it began; past `detachTimeoutMs` it gives up with
 * DetachWaiting, so one old transaction cannot hold the sweeper's run (and every run after it)
 * for as long as it lasts.
 */
export async function dropExpiredPartitions(
  client: pg.ClientBase,
  safetyMs = 60_000,
  recorded: (partition: DroppedPartition) => Promise<void> = () => Promise.resolve(),
  detachTimeoutMs = 60_000,
): Promise<DroppedPartition[]> {
  const { rows: clock } = await client.query<{ now: Date }>('SELECT now() AS now');
  const now = clock[0]?.now.getTime() ?? Date.now();
  const dropped: DroppedPartition[] = [];
  for (const partition of await listPartitions(client)) {
    if (partition.upperBound.getTime() > now - safetyMs) continue;
    const table = client.escapeIdentifier(partition.name);
    const detachStarted = performance.now();
    await client.query(`SET lock_timeout = ${Math.max(1, Math.round(detachTimeoutMs))}`);
    try {
      await client.query(`ALTER TABLE idempotency_keys DETACH PARTITION ${table} ${partition.detachPending ? 'FINALIZE' : 'CONCURRENTLY'}`);
    } catch (error) {
      // lock_not_available: the wait for older transactions ran out (CONCURRENTLY has marked it pending by then).
      if ((error as { code?: unknown }).code === '55P03') throw new DetachWaiting(partition.name, performance.now() - detachStarted);
      throw error;
    } finally {
      // A connection that cannot take this is broken, and the error above says why.
      await client.query('RESET lock_timeout').catch(() => undefined);
    }
    const detachMs = performance.now() - detachStarted;
    const { rows } = await client.query<{ service: string; scope: string; rows: number; min_age_seconds: number; max_past_expiry_seconds: number }>(
      `SELECT service, scope, count(*)::int AS rows, extract(epoch FROM now() - max(created_at))::float8 AS min_age_seconds,
              extract(epoch FROM now() - min(expires_at))::float8 AS max_past_expiry_seconds
       FROM ${table} GROUP BY service, scope`,
    );
    const dropStarted = performance.now();
    await client.query('BEGIN');
    try {
      await client.query(`DROP TABLE ${table}`);
      const gone: DroppedPartition = {
        name: partition.name,
        rows: rows.reduce((sum, row) => sum + row.rows, 0),
        scopes: rows.map((row) => ({ service: row.service, scope: row.scope, rows: row.rows, minAgeSeconds: row.min_age_seconds, maxPastExpirySeconds: row.max_past_expiry_seconds })),
        detachMs,
        dropMs: performance.now() - dropStarted,
      };
      await recorded(gone);
      await client.query('COMMIT');
      dropped.push(gone);
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw error;
    }
  }
  return dropped;
}
