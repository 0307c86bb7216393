// Liveness of the things the product cannot work without: the database, and a
// schema at the version this build expects.
import type pg from 'pg';
import { migrationStatus, type MigrationStatus } from '../db/migrate';

export interface HealthReport {
  status: 'ok' | 'degraded' | 'unavailable';
  database: { reachable: boolean; latencyMs?: number; serverVersion?: string; error?: string };
  migrations?: MigrationStatus;
}

export async function checkHealth(pool: pg.Pool): Promise<HealthReport> {
  const started = performance.now();
  let client: pg.PoolClient;
  try {
    client = await pool.connect();
  } catch (error) {
    return { status: 'unavailable', database: { reachable: false, error: describe(error) } };
  }
  let broken: Error | undefined;
  try {
    // A transaction's own timeout (SET LOCAL): through a transaction pooler a session's would
    // stay on the server connection for its next client.
    await client.query("BEGIN READ ONLY; SET LOCAL statement_timeout = '2s'");
    const { rows } = await client.query<{ server_version: string }>('SHOW server_version');
    const latencyMs = Math.round((performance.now() - started) * 10) / 10;
    const migrations = await migrationStatus(client);
    await client.query('COMMIT');
    return {
      status: migrations.pending.length === 0 ? 'ok' : 'degraded',
      database: { reachable: true, latencyMs, serverVersion: rows[0]?.server_version },
      migrations,
    };
  } catch (error) {
    broken = error instanceof Error ? error : new Error('health query failed');
    return { status: 'unavailable', database: { reachable: false, error: describe(error) } };
  } finally {
    // A client whose query failed is discarded rather than returned to the pool.
    client.release(broken);
  }
}

/** A short reason without connection strings or other configuration in it. */
function describe(error: unknown): string {
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && code !== '') return `database error ${code}`;
  return 'database unreachable';
}
