// The scale bench's bulk loader: key rows written inside Postgres by COPY ... FROM PROGRAM (the
// server runs bench/scale-rows.ts, which prints them in binary COPY format; no per-row round trip
// from here), with the key table's indexes dropped first and built again after the load (parallel
// index builds; VACUUM before them, ANALYZE after), as a restore would. Rows are appended by one
// COPY per stream in parallel, or loaded afresh: the table (each day partition) truncated and
// filled by one COPY ... FREEZE in the same transaction, the streams' row programs sharing its pipe.
// Each phase's CPU (user + sys) is read from /proc where the server is local, and its WAL bytes.
// The indexes come back exactly as the migrations defined them (their definitions are read from
// the catalog before they are dropped).
import { randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { chown, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import pg from 'pg';
import type { EndpointPolicy } from '@retrysafe/store';
import { migrateDatabase } from '../db/migrate';
import { listPartitions } from '../server/retention/partitions';
import { ensurePolicies } from '../server/retention/policies';
import { processCpuSeconds } from './scale-cluster';
import { COPY_COLUMNS, COPY_FREEZE_OPTIONS, COPY_OPTIONS, firstRowExpiringAt, PAYMENTS_SCOPE, programArgs, REFUNDS_SCOPE, SCALE_SERVICE, splitRows, type LoaderSecrets, type RowBatch } from './scale-rows';

const REPO_ROOT = resolve(import.meta.dirname, '..');
const ROW_PROGRAM = 'bench/scale-rows.ts';

/** Drops `name` if it exists and creates it afresh, migrated in `layout` with the store's search path; returns its URL. */
export async function createLayoutDatabase(adminUrl: string, name: string, layout: 'plain' | 'partitioned'): Promise<string> {
  await dropDatabase(adminUrl, name);
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
    await admin.query(`ALTER DATABASE ${name} SET search_path = retrysafe, retrysafe_demo, retrysafe_server, public`);
  } finally {
    await admin.end();
  }
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  await migrateDatabase(url.toString(), { layout });
  return url.toString();
}

/** Drops `name` (WITH FORCE: a bench's idle connections do not hold it). */
export async function dropDatabase(adminUrl: string, name: string): Promise<void> {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  } finally {
    await admin.end();
  }
}

/** Fresh secrets for a load, written to `dir` where the database server's OS user can read them (and nobody else). */
export async function writeLoaderSecrets(dir: string, secrets: LoaderSecrets = newLoaderSecrets()): Promise<{ file: string; secrets: LoaderSecrets }> {
  const file = join(dir, `scale-secrets-${randomBytes(4).toString('hex')}.json`);
  await writeFile(file, JSON.stringify(secrets), { mode: 0o600 });
  // As root, the embedded server runs as the postgres OS user (db/embedded.ts): the file is its.
  if (process.getuid?.() === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
    await chown(file, uid, gid);
  }
  return { file, secrets };
}

/** The loaded service's policies of both scopes, registered as a service registers its own (the key lookup and the partitions' horizon read them). */
export async function registerScalePolicies(pool: pg.Pool, policy: EndpointPolicy): Promise<void> {
  const fields = {
    scopeMode: policy.scopeMode,
    retryWindowSeconds: Math.floor(policy.retryWindowMs / 1000),
    retentionSeconds: Math.floor(policy.retentionMs / 1000),
    leaseMs: policy.leaseMs,
    lockTimeoutMs: policy.lockTimeoutMs,
    maxResponseBytes: policy.maxResponseBytes,
    liveKeyQuota: policy.liveKeyQuota,
  };
  await ensurePolicies(pool, SCALE_SERVICE, { [PAYMENTS_SCOPE]: fields, [REFUNDS_SCOPE]: fields }, 'system');
}

export function newLoaderSecrets(): LoaderSecrets {
  return { fingerprintSecret: randomBytes(32).toString('hex'), keyId: 'k1', key: randomBytes(32).toString('hex') };
}

interface KeyTableIndex {
  name: string;
  definition: string;
  /** Set when the index backs a constraint (the unique key): dropped and added back as one. */
  constraint: string | null;
}

/** The key table's indexes as the migrations made them (parent-level in the partitioned layout). */
export async function keyTableIndexes(db: pg.Pool | pg.PoolClient): Promise<KeyTableIndex[]> {
  const { rows } = await db.query<{ name: string; definition: string; constraint_name: string | null; constraint_definition: string | null }>(
    `SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS definition,
            con.conname AS constraint_name, pg_get_constraintdef(con.oid) AS constraint_definition
       FROM pg_index i
       JOIN pg_class c ON c.oid = i.indexrelid
       LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid AND con.conrelid = i.indrelid
      WHERE i.indrelid = 'retrysafe.idempotency_keys'::regclass
      ORDER BY con.conname IS NULL, c.relname`,
  );
  return rows.map((row) => ({
    name: row.name,
    // A partitioned table's index reads `ON ONLY` (the parent alone): built again on every partition.
    definition: row.definition.replace(' ON ONLY ', ' ON '),
    constraint: row.constraint_name && row.constraint_definition ? `ALTER TABLE retrysafe.idempotency_keys ADD CONSTRAINT ${row.constraint_name} ${row.constraint_definition}` : null,
  }));
}

export interface LoadTimes {
  rows: number;
  /** How the rows went in (LoadOptions.fresh). */
  mode: 'fresh' | 'append';
  copySeconds: number;
  indexSeconds: number;
  vacuumSeconds: number;
  totalSeconds: number;
  rowsPerSecond: number;
  /**
   * CPU (user + sys) seconds, robust to other load on the machine where wall time is not; null
   * where the server's processes cannot be read (/proc of another host). The COPY backends' own
   * and their row programs' (reaped by the backend, so in its children's times).
   */
  copyBackendCpuSeconds: number | null;
  rowProgramCpuSeconds: number | null;
  /** The server's processes (backends, parallel workers, row programs) over the index builds and over VACUUM and ANALYZE, from `serverCpuSeconds`. */
  indexCpuSeconds: number | null;
  vacuumCpuSeconds: number | null;
  /** WAL written by each phase (pg_current_wal_lsn deltas: the whole server's, the load being all it runs). */
  copyWalBytes: number;
  indexWalBytes: number;
  vacuumWalBytes: number;
}

/** The server's WAL position in bytes (pg_current_wal_lsn from 0/0). */
export const walPosition = async (db: pg.Pool | pg.PoolClient) => Number((await db.query<{ lsn: string }>("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0') AS lsn")).rows[0]?.lsn ?? 0);

export interface LoadOptions {
  batch: RowBatch;
  secretsFile: string;
  /** Parallel row programs: appending, a COPY (a server backend) each; fresh, printers sharing each COPY's pipe. */
  streams: number;
  /**
   * Empty the key table and load the batch (which must start at row 0) with COPY ... FREEZE, one
   * COPY per heap (the table, or each day partition) in the transaction that truncates it: the
   * rows go in frozen and nearly all their pages all-visible, so VACUUM has little left to do
   * (after an append it writes every new heap page to WAL again, the cluster having data
   * checksums). Otherwise the rows are appended by parallel COPYs. The cheaper way for a step
   * (scale bench) depends on the rows already there.
   */
  fresh?: boolean;
  /** For CREATE INDEX. */
  maintenanceWorkMem?: string;
  /** Parallel workers per index build besides the leader (max_parallel_maintenance_workers); default the streams less one. */
  indexWorkers?: number;
  /** The server's CPU seconds so far (every process of it, exited ones included through their parents' children's times). */
  serverCpuSeconds?: () => Promise<number>;
}

/** Loads `batch` into the key table of the pool's database: drop indexes, COPY (appended in parallel, or fresh and frozen), VACUUM, build indexes, ANALYZE. */
export async function loadScaleRows(pool: pg.Pool, options: LoadOptions): Promise<LoadTimes> {
  const { batch } = options;
  const began = performance.now();
  const indexes = await keyTableIndexes(pool);
  if (!indexes.some((index) => index.constraint !== null)) throw new Error('the key table has no unique key to build again');
  await pool.query('SELECT retrysafe.retrysafe_ensure_partitions()');
  for (const index of indexes) {
    if (index.constraint) await pool.query(`ALTER TABLE retrysafe.idempotency_keys DROP CONSTRAINT ${index.name}`);
    else await pool.query(`DROP INDEX retrysafe.${index.name}`);
  }

  const copyCpu = { backend: 0, program: 0, known: true };
  const copyWal = await walPosition(pool);
  const copyBegan = performance.now();
  const streams = Math.max(1, Math.min(options.streams, batch.count));
  /** One COPY of `slice` of the batch into `table` by `printers` row programs, its CPU counted; its rows must be all of the slice's. */
  const copy = async (client: pg.PoolClient, table: string, slice: { from: number; count: number }, printers: number, copyOptions: string) => {
    const program = [`cd ${shellQuote(REPO_ROOT)}`, '&&', 'exec', shellQuote(process.execPath), '--conditions=retrysafe-source', '--import', 'tsx', ROW_PROGRAM, ...programArgs({ ...batch, slice }, options.secretsFile, printers).map(shellQuote)].join(' ');
    const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid ?? 0;
    const before = processCpuSeconds(pid);
    const { rowCount } = await client.query(`COPY ${table} (${COPY_COLUMNS.join(', ')}) FROM PROGRAM ${client.escapeLiteral(program)} WITH ${copyOptions}`);
    const after = processCpuSeconds(pid);
    if (rowCount !== slice.count) throw new Error(`COPY into ${table} took ${rowCount} rows, not ${slice.count}`);
    if (before && after) {
      copyCpu.backend += after.own - before.own;
      copyCpu.program += after.children - before.children;
    } else copyCpu.known = false;
  };
  const load = async () => {
    if (!options.fresh) {
      await Promise.all(
        splitRows(0, batch.count, streams).map(async (slice) => {
          const client = await pool.connect();
          try {
            await copy(client, 'retrysafe.idempotency_keys', slice, 1, COPY_OPTIONS);
          } finally {
            client.release();
          }
        }),
      );
      return;
    }
    if (batch.from !== 0) throw new Error('a fresh load starts at row 0');
    const client = await pool.connect();
    try {
      // One transaction: a load that fails leaves the rows that were there. FREEZE needs each heap
      // truncated in the COPY's own transaction, and a partition itself (a partitioned table
      // refuses it): one COPY a heap, its printers sharing the pipe.
      await client.query('BEGIN');
      for (const heap of await freshTargets(client, batch)) {
        await client.query(`TRUNCATE ${heap.table}`);
        if (heap.slice.count > 0) await copy(client, heap.table, heap.slice, streams, COPY_FREEZE_OPTIONS);
      }
      await client.query('COMMIT');
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw error;
    } finally {
      client.release();
    }
  };
  try {
    await load();
  } catch (error) {
    // Give the table its indexes back before reporting the failure.
    for (const index of indexes) await pool.query(index.constraint ?? index.definition).catch(() => undefined);
    throw error;
  }

  const client = await pool.connect();
  try {
    const spent = (from: number | undefined, to: number | undefined) => (from === undefined || to === undefined ? null : to - from);
    // VACUUM before the index builds: its one pass over the new heap pages sets their hint bits
    // and all-visible flags (a full-page image each in WAL, the cluster having data checksums), so
    // the builds' scans of the heap find them set and dirty nothing. Built first, the indexes'
    // scans set the hint bits and VACUUM then wrote every heap page's image a second time (at 85.4
    // M keys, 58 GB of WAL in the builds for 19 GB of indexes, and 41 GB in VACUUM). ANALYZE comes
    // last, beside the indexes; both are counted as the VACUUM ANALYZE phase.
    // Each phase's start: its wall time, the server's CPU so far and its WAL position.
    const mark = async () => ({ at: performance.now(), cpu: await options.serverCpuSeconds?.(), wal: await walPosition(client) });
    const vacuumBegan = await mark();
    // After a fresh load it visits only the pages COPY ... FREEZE left unmarked (none at 86.4 M,
    // a few in the test's thousands) and resets the count of rows inserted since, so autovacuum
    // does not start during the measured claims.
    await client.query('VACUUM retrysafe.idempotency_keys');
    const indexBegan = await mark();
    await client.query(`SET maintenance_work_mem = '${options.maintenanceWorkMem ?? '256MB'}'`);
    // Each build sorts with the leader and this many workers (the table is large, so the planner takes them).
    await client.query(`SET max_parallel_maintenance_workers = ${Math.max(0, Math.floor(options.indexWorkers ?? streams - 1))}`);
    for (const index of indexes) await client.query(index.constraint ?? index.definition);
    const analyzeBegan = await mark();
    await client.query('ANALYZE retrysafe.idempotency_keys');
    const done = await mark();
    const vacuumCpu = spent(vacuumBegan.cpu, indexBegan.cpu);
    const analyzeCpu = spent(analyzeBegan.cpu, done.cpu);
    return {
      copyBackendCpuSeconds: copyCpu.known ? copyCpu.backend : null,
      rowProgramCpuSeconds: copyCpu.known ? copyCpu.program : null,
      indexCpuSeconds: spent(indexBegan.cpu, analyzeBegan.cpu),
      vacuumCpuSeconds: vacuumCpu === null || analyzeCpu === null ? null : vacuumCpu + analyzeCpu,
      copyWalBytes: vacuumBegan.wal - copyWal,
      indexWalBytes: analyzeBegan.wal - indexBegan.wal,
      vacuumWalBytes: indexBegan.wal - vacuumBegan.wal + (done.wal - analyzeBegan.wal),
      rows: batch.count,
      mode: options.fresh ? 'fresh' : 'append',
      copySeconds: (vacuumBegan.at - copyBegan) / 1000,
      indexSeconds: (analyzeBegan.at - indexBegan.at) / 1000,
      vacuumSeconds: (indexBegan.at - vacuumBegan.at + (done.at - analyzeBegan.at)) / 1000,
      totalSeconds: (done.at - began) / 1000,
      rowsPerSecond: batch.count / ((done.at - began) / 1000),
    };
  } finally {
    await client.query('RESET maintenance_work_mem; RESET max_parallel_maintenance_workers').catch(() => undefined);
    client.release();
  }
}

/**
 * Where a fresh load's rows go: the table itself, or, partitioned, each day partition and the
 * batch's rows whose expiries fall in it (a row no partition takes is an error before anything
 * is truncated).
 */
async function freshTargets(client: pg.PoolClient, batch: RowBatch): Promise<{ table: string; slice: { from: number; count: number } }[]> {
  const leaves = await listPartitions(client);
  if (leaves.length === 0) return [{ table: 'retrysafe.idempotency_keys', slice: { from: 0, count: batch.count } }];
  const targets = leaves
    .sort((a, b) => a.lowerBound.getTime() - b.lowerBound.getTime())
    .map((leaf) => {
      const from = firstRowExpiringAt(batch, leaf.lowerBound.getTime());
      return { table: `retrysafe.${client.escapeIdentifier(leaf.name)}`, slice: { from, count: firstRowExpiringAt(batch, leaf.upperBound.getTime()) - from } };
    });
  const taken = targets.reduce((sum, target) => sum + target.slice.count, 0);
  if (taken !== batch.count) throw new Error(`the day partitions take ${taken} of the batch's ${batch.count} rows: create partitions for its whole window first`);
  return targets;
}

function shellQuote(value: string): string {
  return `'${value.replaceAll("'", "'\\''")}'`;
}
