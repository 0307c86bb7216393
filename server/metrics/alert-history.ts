// Alert history: once a minute one instance (a transaction-scoped advisory lock) evaluates the
// alerts as the overview does and records each firing's start and, once it stops, its end
// (retrysafe_server.alert_history), so the overview marks alerts that came and went, not only
// the ones firing now. Written once however many instances run: the lock, and under it the
// unique index of the open firings. Rows older than the overview's longest range are deleted.
import type pg from 'pg';
import type { Queryable } from '@retrysafe/store/postgres';
import { inTransaction } from '../../db/transaction';
import { alertThresholds, evaluateAlertStates, readAlertInputs, type Alert, type AlertThresholds } from './alerts';
import { readTogether } from './read-together';
import type { StaleElsewhereReader } from './stale-elsewhere';

/** pg_advisory_xact_lock key: the bytes of "rsalrt" as an integer. */
const ALERT_HISTORY_LOCK_KEY = 0x7273616c7274n;

/** Ended firings and service starts (retrysafe.service_starts) are kept this long: the overview's longest range (30 d) and some. */
export const SERVER_EVENTS_RETENTION_DAYS = 35;

/** At most this many of each (starts, ends) in a window: the overview's EVENTS_PER_KIND. */
const LIMIT = 200;

/** A firing as recorded: service and scope are null for an alert of the store or of all scopes. */
export interface AlertFiring {
  check: string;
  service: string | null;
  scope: string | null;
  storeWide: boolean;
  severity: string;
  summary: string;
  startedAt: Date;
  endedAt: Date | null;
}

export interface AlertTransitions {
  started: number;
  ended: number;
}

const keyOf = (alert: { check: string; service: string | null; scope: string | null }) => `${alert.check}\0${alert.service ?? ''}\0${alert.scope ?? ''}`;

/**
 * Records the alerts firing at `now` against the firings still open: a firing not yet open
 * starts (at the alert's `since`, or `now`), an open one no longer firing ends at `now`. Safe
 * with another writer at once: the insert meets the open-firing unique index (ON CONFLICT DO
 * NOTHING), and the end is set only where it is still unset.
 */
export async function recordAlertTransitions(db: Pick<pg.ClientBase, 'query'>, firing: readonly Alert[], now: Date): Promise<AlertTransitions> {
  // The open firings, through the partial unique index alert_history_open_key.
  const { rows: open } = await db.query<{ check: string; service: string; scope: string }>({
    name: 'alert_history_open',
    text: 'SELECT "check", service, scope FROM retrysafe_server.alert_history WHERE ended_at IS NULL',
  });
  const openKeys = new Set(open.map((row) => keyOf(row)));
  const firingKeys = new Set(firing.map((alert) => keyOf({ check: alert.name, service: alert.service, scope: alert.scope })));
  let started = 0;
  for (const alert of firing) {
    if (openKeys.has(keyOf({ check: alert.name, service: alert.service, scope: alert.scope }))) continue;
    const since = alert.since !== null && alert.since <= now ? alert.since : now;
    const { rowCount } = await db.query({
      name: 'alert_history_start',
      text: `INSERT INTO retrysafe_server.alert_history ("check", service, scope, store_wide, severity, summary, started_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
      values: [alert.name, alert.service ?? '', alert.scope ?? '', alert.storeWide, alert.severity, alert.summary, since],
    });
    started += rowCount ?? 0;
  }
  let ended = 0;
  for (const row of open) {
    if (firingKeys.has(keyOf(row))) continue;
    const { rowCount } = await db.query({
      name: 'alert_history_end',
      text: `UPDATE retrysafe_server.alert_history SET ended_at = greatest($4::timestamptz, started_at)
             WHERE "check" = $1 AND service = $2 AND scope = $3 AND ended_at IS NULL`,
      values: [row.check, row.service, row.scope, now],
    });
    ended += rowCount ?? 0;
  }
  return { started, ended };
}

/**
 * One evaluation (the duty's run): unless another instance holds the lock, reads the alert
 * inputs as the overview does (every service and scope), records the transitions and deletes
 * what is past SERVER_EVENTS_RETENTION_DAYS. null when another instance was at it.
 */
export async function recordAlertHistory(
  pool: pg.Pool,
  options: { thresholds?: AlertThresholds; sweepIntervalSeconds?: number; databaseMemoryBytes?: number | undefined; staleElsewhere?: StaleElsewhereReader | undefined } = {},
): Promise<AlertTransitions | null> {
  const thresholds = options.thresholds ?? alertThresholds;
  return inTransaction(pool, async (client) => {
    const { rows: lock } = await client.query<{ locked: boolean; now: Date }>('SELECT pg_try_advisory_xact_lock($1) AS locked, now() AS now', [ALERT_HISTORY_LOCK_KEY.toString()]);
    if (!lock[0]?.locked) return null;
    const now = lock[0].now;
    // The standby's lag is each instance's own reading (DASHBOARD_READ_URL): not recorded.
    // Services kept in Redis or MySQL: their backends' stale claims (each at most its budget).
    const inputs = await readAlertInputs(client, { thresholds, sweepIntervalSeconds: options.sweepIntervalSeconds, databaseMemoryBytes: options.databaseMemoryBytes, now, staleElsewhere: options.staleElsewhere });
    const transitions = await recordAlertTransitions(client, evaluateAlertStates(inputs, thresholds).firing, now);
    // Through alert_history_ended_idx and service_starts_started_idx (the store's table of service
    // instances' starts: the server prunes it for every service, none of which prunes its own).
    await client.query({
      name: 'server_events_retention',
      text: `WITH a AS (DELETE FROM retrysafe_server.alert_history WHERE ended_at < $1::timestamptz - $2::int * interval '1 day')
             DELETE FROM retrysafe.service_starts WHERE started_at < $1::timestamptz - $2::int * interval '1 day'`,
      values: [now, SERVER_EVENTS_RETENTION_DAYS],
    });
    return transitions;
  });
}

/**
 * The firings of a choice (a service, a scope, both or neither, as the overview chooses its
 * alerts: the store's are always in) that started in [from, to), those that ended in it, and
 * the ones still open (whatever their start), each at most LIMIT, newest first. The starts are
 * a backward range of alert_history_started_idx, the ends of alert_history_ended_idx, the open
 * ones the partial index alert_history_open_key.
 */
export async function readAlertHistory(
  db: Queryable,
  choice: { from: Date; to: Date; service: string | null; scope: string | null },
): Promise<{ started: AlertFiring[]; ended: AlertFiring[]; open: AlertFiring[] }> {
  const columns = '"check", service, scope, store_wide, severity, summary, started_at, ended_at';
  const chosen = `(store_wide OR (($3::text IS NULL OR service = $3) AND ($4::text IS NULL OR scope = $4 OR (scope = '' AND service <> ''))))`;
  type Row = { check: string; service: string; scope: string; store_wide: boolean; severity: string; summary: string; started_at: Date; ended_at: Date | null };
  const values = [choice.from, choice.to, choice.service, choice.scope];
  const [started, ended, open] = await readTogether(db, [
    () =>
      db.query<Row>({
        name: 'dashboard_overview_alert_starts',
        text: `SELECT ${columns} FROM retrysafe_server.alert_history WHERE started_at >= $1 AND started_at < $2 AND ${chosen} ORDER BY started_at DESC LIMIT ${LIMIT}`,
        values,
      }),
    () =>
      db.query<Row>({
        name: 'dashboard_overview_alert_ends',
        text: `SELECT ${columns} FROM retrysafe_server.alert_history WHERE ended_at >= $1 AND ended_at < $2 AND ${chosen} ORDER BY ended_at DESC LIMIT ${LIMIT}`,
        values,
      }),
    () =>
      db.query<Row>({
        name: 'dashboard_overview_alert_open',
        text: `SELECT ${columns} FROM retrysafe_server.alert_history WHERE ended_at IS NULL AND ${chosen.replaceAll('$3', '$1').replaceAll('$4', '$2')} LIMIT ${LIMIT}`,
        values: [choice.service, choice.scope],
      }),
  ]);
  const firing = (row: Row): AlertFiring => ({
    check: row.check,
    service: row.service === '' ? null : row.service,
    scope: row.scope === '' ? null : row.scope,
    storeWide: row.store_wide,
    severity: row.severity,
    summary: row.summary,
    startedAt: row.started_at,
    endedAt: row.ended_at,
  });
  return { started: started.rows.map(firing), ended: ended.rows.map(firing), open: open.rows.map(firing) };
}

/** Whether a live alert (the overview's evaluation now) is a firing the history holds open. */
export function isRecordedOpen(alert: Pick<Alert, 'name' | 'service' | 'scope'>, open: readonly AlertFiring[]): boolean {
  const key = keyOf({ check: alert.name, service: alert.service, scope: alert.scope });
  return open.some((firing) => keyOf(firing) === key);
}

/** "40 s", "12 min", "3 h 5 min", "2 d 4 h": how long a firing lasted. */
export function durationText(ms: number): string {
  const minutes = Math.round(ms / 60_000);
  if (minutes < 1) return `${Math.max(0, Math.round(ms / 1000))} s`;
  if (minutes < 60) return `${minutes} min`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return minutes % 60 === 0 ? `${hours} h` : `${hours} h ${minutes % 60} min`;
  return `${Math.floor(hours / 24)} d ${hours % 24} h`;
}
