// Each test file gets its own database, cloned from the run's migrated template, so files run in
// parallel without seeing each other's rows. The templates are the package's (test/setup/global.ts);
// the Retrysafe server's tests clone theirs through the same functions, with their search path.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, inject } from 'vitest';
import { withDatabase } from './database-url';
import { STORE_POOL_SETTINGS, STORE_POOLER_POOL_SETTINGS, type PoolerMode } from '@retrysafe/store/postgres';
import { hasPgBouncer, preparedPgBouncerPath, startPgBouncer, type PgBouncer } from './pgbouncer';

/** The store's schema first, so tests name its tables unqualified (the store's own statements are schema-qualified). */
export const STORE_SEARCH_PATH = 'retrysafe, public';

export interface TestDatabase {
  /** Connection string of this file's database (owner role). */
  url: string;
  /** A pool on it, closed after the file's tests. */
  pool: pg.Pool;
  /** Another, connected as a service's store pool is (STORE_POOL_SETTINGS: pipelined, its session settings). */
  storePool: pg.Pool;
  /** With `pooler`: the PgBouncer (transaction mode) that `pool` and `storePool` go through. */
  pgbouncer?: PgBouncer;
}

/** How a test file's store reaches its database: the layout, and direct or through PgBouncer (transaction mode). */
export interface StoreConnection {
  layout: StoreLayout;
  /** Through PgBouncer in transaction mode: unnamed statements (`transaction`) or named ones it tracks (`transaction-prepared`, PgBouncer 1.21 and later). */
  pooler: false | PoolerMode;
  /** For describe titles. */
  name: string;
}

/** Both layouts, direct and through a transaction-mode PgBouncer. */
export const storeConnections: StoreConnection[] = (['plain', 'partitioned'] as const).flatMap((layout) => [
  { layout, pooler: false, name: `${layout} layout` },
  { layout, pooler: 'transaction', name: `${layout} layout, through PgBouncer (transaction mode)` },
  { layout, pooler: 'transaction-prepared', name: `${layout} layout, through PgBouncer (transaction mode, prepared statements)` },
]);

/** Whether this machine can run `connection` (a PgBouncer, and for prepared statements one of 1.21 or later). */
export function runnable(connection: Pick<StoreConnection, 'pooler'>): boolean {
  if (connection.pooler === 'transaction') return hasPgBouncer;
  if (connection.pooler === 'transaction-prepared') return preparedPgBouncerPath !== undefined;
  return true;
}

export type StoreLayout = 'plain' | 'partitioned';
export const layouts: StoreLayout[] = ['plain', 'partitioned'];

export interface CreateOptions {
  /** A database with no schema at all (template0) instead of a copy of the migrated template. */
  empty?: boolean;
  layout?: StoreLayout;
  /** The database's default search_path (STORE_SEARCH_PATH unless told); false keeps Postgres's own (an adopter's database, where only the store's schema-qualified statements run). */
  searchPath?: string | false;
}

/** A fresh database: a copy of the migrated template (in the given layout), or with `empty`, one with no schema at all. */
export async function createTestDatabase(options: CreateOptions = {}): Promise<{ url: string; drop(): Promise<void> }> {
  const adminUrl = inject('adminUrl');
  const name = `${inject('runPrefix')}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    // Two files cloning the template at the same instant can collide; retry briefly.
    for (let attempt = 0; ; attempt += 1) {
      try {
        await admin.query(`CREATE DATABASE ${name} TEMPLATE ${options.empty ? 'template0' : options.layout === 'partitioned' ? inject('partitionedTemplateDatabase') : inject('templateDatabase')}`);
        break;
      } catch (error) {
        if ((error as { code?: string }).code !== '55006' || attempt >= 20) throw error;
        await new Promise((done) => setTimeout(done, 100));
      }
    }
    const searchPath = options.searchPath ?? STORE_SEARCH_PATH;
    if (searchPath !== false) await admin.query(`ALTER DATABASE ${name} SET search_path = ${searchPath}`);
  } finally {
    await admin.end();
  }
  if (options.layout === 'partitioned' && !options.empty) {
    // The template's day partitions run ahead of the day it was migrated; a run that crosses
    // midnight (UTC) needs the next day's too, as the sweeper creates them on a live server, and
    // not the day it was migrated on, now ended, which a live server's sweeper would have dropped
    // (empty in the template; a test that attaches yesterday's partition would find it taken).
    const client = new pg.Client({ connectionString: withDatabase(adminUrl, name) });
    await client.connect();
    try {
      await client.query('SELECT retrysafe.retrysafe_ensure_partitions()');
      await client.query(`DO $$ DECLARE ended text; BEGIN
        FOR ended IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                     WHERE i.inhparent = 'retrysafe.idempotency_keys'::regclass AND c.relname ~ '^idempotency_keys_p[0-9]{8}$'
                       AND c.relname < 'idempotency_keys_p' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') LOOP
          EXECUTE format('DROP TABLE retrysafe.%I', ended);
        END LOOP;
      END $$`);
    } finally {
      await client.end();
    }
  }
  return {
    url: withDatabase(adminUrl, name),
    async drop() {
      const client = new pg.Client({ connectionString: adminUrl });
      await client.connect();
      try {
        // Connections that were just ended may still be closing: wait for them rather than
        // FORCE-terminating them (a client mid-close would report the termination as an error).
        for (let attempt = 0; ; attempt += 1) {
          try {
            await client.query(`DROP DATABASE IF EXISTS ${name}${attempt >= 50 ? ' WITH (FORCE)' : ''}`);
            break;
          } catch (error) {
            if ((error as { code?: string }).code !== '55006') throw error;
            await new Promise((done) => setTimeout(done, 100));
          }
        }
      } finally {
        await client.end();
      }
    },
  };
}

/** Registers beforeAll/afterAll hooks; the returned object is filled in before the first test. */
export function useTestDatabase(layout: StoreLayout = 'plain', options: { pooler?: boolean | PoolerMode; searchPath?: string } = {}): TestDatabase {
  const handle = {} as TestDatabase;
  let created: Awaited<ReturnType<typeof createTestDatabase>> | undefined;
  beforeAll(async () => {
    created = await createTestDatabase({ layout, searchPath: options.searchPath });
    handle.url = created.url;
    if (options.pooler) {
      // pool and storePool through PgBouncer; the URL stays direct.
      handle.pgbouncer = await startPgBouncer(
        options.pooler === 'transaction-prepared' ? { upstreamUrl: created.url, poolSize: 20, binary: preparedPgBouncerPath, maxPreparedStatements: 200 } : { upstreamUrl: created.url, poolSize: 20 },
      );
      handle.pool = new pg.Pool({ connectionString: handle.pgbouncer.url(), max: 40 });
      handle.storePool = new pg.Pool({ connectionString: handle.pgbouncer.url(), max: 40, ...STORE_POOLER_POOL_SETTINGS });
      // Tests restart the pooler: idle connections it cut are dropped (and would be unhandled errors).
      for (const pool of [handle.pool, handle.storePool]) pool.on('error', () => undefined);
    } else {
      handle.pool = new pg.Pool({ connectionString: created.url, max: 40 });
      handle.storePool = new pg.Pool({ connectionString: created.url, max: 40, ...STORE_POOL_SETTINGS });
    }
  });
  afterAll(async () => {
    await (handle.pool as pg.Pool | undefined)?.end();
    await (handle.storePool as pg.Pool | undefined)?.end();
    await handle.pgbouncer?.stop();
    await created?.drop();
  });
  return handle;
}
