// How far the dashboard's hot standby (DASHBOARD_READ_URL) is behind the primary: what the
// overview shows beside the store's figures, /api/metrics exports and the replica_lag alert
// judges. Read live (two one-row statements, no table touched), the primary first.
//
// What is shown, and why: `now() - pg_last_xact_replay_timestamp()` alone grows without bound on
// an idle primary (no commit to replay) although the standby is current. So the WAL positions
// decide whether the standby is behind at all: the primary's pg_current_wal_lsn(), read first,
// against the standby's pg_last_wal_replay_lsn(), read after. Caught up (it has replayed all the
// primary had written when asked): 0 bytes and 0 s. Behind: the bytes it has yet to replay, and
// the time since the last transaction it replayed committed on the primary, an upper bound on
// how old its data is (it has not applied what came after that commit).
import type { Queryable } from '@retrysafe/store/postgres';

export interface ReplicaLag {
  /** When measured, on the standby's clock. */
  measuredAt: Date;
  /** False when the standby was promoted (a primary now): its lag is then null. */
  inRecovery: boolean;
  /** pg_wal_replay_pause() holds its replay (it still receives WAL). */
  replayPaused: boolean;
  /** WAL bytes the primary had written when asked that the standby has not replayed. */
  bytes: number | null;
  /** 0 when caught up; else seconds since the last transaction it replayed committed (null: none replayed since it started). */
  seconds: number | null;
}

/** The primary's WAL write position (any role may ask). */
export const primaryWalPositionText = 'SELECT pg_current_wal_lsn()::text AS lsn';

/**
 * The standby's recovery, replay position against the primary's ($1) and last replayed commit.
 * pg_is_wal_replay_paused() raises outside recovery, hence the CASE.
 */
export const standbyReplayText = `SELECT now() AS now, pg_is_in_recovery() AS in_recovery,
       CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() ELSE false END AS paused,
       greatest(pg_wal_lsn_diff($1::pg_lsn, pg_last_wal_replay_lsn()), 0)::float8 AS bytes,
       extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 AS since_replayed`;

/** The standby's lag behind the primary: `primary` and `standby` are the dashboard's two pools. */
export async function readReplicaLag(primary: Queryable, standby: Queryable): Promise<ReplicaLag> {
  const { rows: written } = await primary.query<{ lsn: string }>({ name: 'replica_lag_primary_position', text: primaryWalPositionText });
  const lsn = written[0]?.lsn;
  if (lsn === undefined) throw new Error('the primary reported no WAL position');
  const { rows } = await standby.query<{ now: Date; in_recovery: boolean; paused: boolean; bytes: number | null; since_replayed: number | null }>({
    name: 'replica_lag_standby_replay',
    text: standbyReplayText,
    values: [lsn],
  });
  const row = rows[0];
  if (!row) throw new Error('the standby reported no replay position');
  if (!row.in_recovery) return { measuredAt: row.now, inRecovery: false, replayPaused: false, bytes: null, seconds: null };
  const bytes = row.bytes ?? 0;
  return {
    measuredAt: row.now,
    inRecovery: true,
    replayPaused: row.paused,
    bytes,
    seconds: bytes === 0 ? 0 : row.since_replayed === null ? null : Math.max(0, row.since_replayed),
  };
}
