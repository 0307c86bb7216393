// Issue #26, points 2 and 3 and its bad input, against a real PgBouncer in front of the test
// database: what each URL is (direct, session pool, transaction pool) is found at start, a
// mismatch with DATABASE_POOLER or an unreachable database is one line naming the setting,
// migrations refuse a transaction pooler, and the server's pools work through one (no startup
// parameters, no named statements, the search_path from the role's setting).
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { behindTransactionPooler, SessionRequiredError } from '@retrysafe/store/migrate';
import { createPool } from '../../db/client';
import { AUTH_ROLE } from '../../db/dashboard-access';
import { migrateDatabase } from '../../db/migrate';
import { checkDatabaseUrl, checkDirectUrl, checkPooledSearchPath, setPooledSearchPath } from '../../db/topology';
import { ConfigurationError } from '../../server/config';
import { useTestDatabase } from '../helpers/database';
import { hasPgBouncer, pgBouncerPrepares, preparedPgBouncerPath, startPgBouncer, type PgBouncer } from '../../packages/store/test/helpers/pgbouncer';

const run = promisify(execFile);

/** A command the way a user runs it; its exit code, stdout and stderr. */
async function command(args: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, ['--conditions=retrysafe-source', '--import', 'tsx', ...args], {
      env: { ...process.env, DATABASE_POOLER: '', DATABASE_DIRECT_URL: '', ...env },
      timeout: 60_000,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof failed.code === 'number' ? failed.code : -1, stdout: failed.stdout ?? '', stderr: failed.stderr ?? '' };
  }
}

describe('an unreachable DATABASE_URL', () => {
  it('is one line naming DATABASE_URL and where it points, without the password', async () => {
    const error = await checkDatabaseUrl({}, 'postgres://owner:s3cret-password@127.0.0.1:1/app').catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ConfigurationError);
    const message = (error as Error).message;
    expect(message).toMatch(/^DATABASE_URL: cannot connect to 127\.0\.0\.1:1\/app \(.*ECONNREFUSED.*\)$/);
    expect(message).not.toContain('s3cret');
  });

  it('stops `npm run cli -- migrate` at once with that line', async () => {
    const result = await command(['server/cli/main.ts', 'migrate'], { DATABASE_URL: 'postgres://owner:s3cret@127.0.0.1:1/app' });
    expect(result.code).toBe(1);
    expect(result.stderr.trim()).toMatch(/^error: DATABASE_URL: cannot connect to 127\.0\.0\.1:1\/app/);
    expect(result.stderr).not.toContain('s3cret');
  });
});

describe.skipIf(!hasPgBouncer)('through PgBouncer', () => {
  const db = useTestDatabase();
  let transaction: PgBouncer | undefined;
  let session: PgBouncer | undefined;

  beforeAll(async () => {
    transaction = await startPgBouncer({ upstreamUrl: db.url, mode: 'transaction', poolSize: 2 });
    session = await startPgBouncer({ upstreamUrl: db.url, mode: 'session' });
  });
  afterAll(async () => {
    await transaction?.stop();
    await session?.stop();
  });

  it('tells a transaction pooler from a direct connection and a session pool', async () => {
    expect(await behindTransactionPooler(db.url)).toBe(false);
    expect(await behindTransactionPooler(session?.url() ?? '')).toBe(false);
    expect(await behindTransactionPooler(transaction?.url() ?? '')).toBe(true);
  });

  it('refuses DATABASE_POOLER=transaction-prepared on a pooler that passes named statements through, saying what to set', async () => {
    // Debian 12's PgBouncer (1.18) passes them through; a later one does when told max_prepared_statements = 0.
    const passing = pgBouncerPrepares ? await startPgBouncer({ upstreamUrl: db.url, poolSize: 2, maxPreparedStatements: 0 }) : transaction;
    try {
      await expect(checkDatabaseUrl({ DATABASE_POOLER: 'transaction-prepared' }, passing?.url() ?? '')).rejects.toThrow(
        /^DATABASE_POOLER=transaction-prepared, but the pooler at DATABASE_URL passes named statements through .*set max_prepared_statements in the pooler .*or DATABASE_POOLER=transaction$/,
      );
      await expect(checkDatabaseUrl({ DATABASE_POOLER: 'transaction' }, passing?.url() ?? '')).resolves.toBeUndefined();
    } finally {
      if (passing !== transaction) await passing?.stop();
    }
  });

  it.skipIf(!preparedPgBouncerPath)('accepts DATABASE_POOLER=transaction-prepared on a PgBouncer that tracks them', async () => {
    const tracking = await startPgBouncer({ upstreamUrl: db.url, poolSize: 2, binary: preparedPgBouncerPath, maxPreparedStatements: 200 });
    try {
      await expect(checkDatabaseUrl({ DATABASE_POOLER: 'transaction-prepared' }, tracking.url())).resolves.toBeUndefined();
    } finally {
      await tracking.stop();
    }
  });

  it('names DATABASE_POOLER when the pooler is in the other mode than it says', async () => {
    await expect(checkDatabaseUrl({}, transaction?.url() ?? '')).rejects.toThrow(/^DATABASE_URL goes through a transaction-mode pooler .*set DATABASE_POOLER=transaction/);
    await expect(checkDatabaseUrl({ DATABASE_POOLER: 'transaction' }, session?.url() ?? '')).rejects.toThrow(/^DATABASE_POOLER=transaction, but DATABASE_URL is not a transaction-mode pooler/);
    await expect(checkDatabaseUrl({ DATABASE_POOLER: 'transaction' }, db.url)).rejects.toThrow(/^DATABASE_POOLER=transaction, but DATABASE_URL is not/);
    await expect(checkDatabaseUrl({ DATABASE_POOLER: 'transaction' }, transaction?.url() ?? '')).resolves.toBeUndefined();
    await expect(checkDatabaseUrl({}, session?.url() ?? '')).resolves.toBeUndefined();
    await expect(checkDirectUrl({ DATABASE_DIRECT_URL: transaction?.url() ?? '' })).rejects.toThrow(/^DATABASE_DIRECT_URL goes through a transaction-mode pooler/);
  });

  it('refuses to migrate through a transaction pooler, before taking any lock', async () => {
    await expect(migrateDatabase(transaction?.url() ?? '')).rejects.toBeInstanceOf(SessionRequiredError);
    await expect(migrateDatabase(transaction?.url() ?? '')).rejects.toThrow(/session advisory lock/);
  });

  it('refuses `npx retrysafe migrate` through a transaction pooler in one line naming DATABASE_URL', async () => {
    const result = await command(['packages/store/src/cli.ts', 'migrate'], { DATABASE_URL: transaction?.url() ?? '' });
    expect(result.code).toBe(1);
    expect(result.stderr.trim().split('\n')).toHaveLength(1);
    expect(result.stderr).toMatch(/^retrysafe migrate refused: DATABASE_URL goes through a transaction-mode pooler/);
  });

  it('refuses `npm run cli -- migrate` with DATABASE_POOLER=transaction and no DATABASE_DIRECT_URL, and migrates with one', async () => {
    const refused = await command(['server/cli/main.ts', 'migrate'], { DATABASE_URL: transaction?.url() ?? '', DATABASE_POOLER: 'transaction' });
    expect(refused.code).toBe(1);
    expect(refused.stderr.trim()).toMatch(/^error: Migrating refused: .*DATABASE_POOLER=transaction.*set DATABASE_DIRECT_URL to a direct connection/);
    const migrated = await command(['server/cli/main.ts', 'migrate'], { DATABASE_URL: transaction?.url() ?? '', DATABASE_POOLER: 'transaction', DATABASE_DIRECT_URL: db.url });
    expect(migrated.stderr).toBe('');
    expect(migrated.code).toBe(0);
    expect(JSON.parse(migrated.stdout)).toMatchObject({ applied: [] });
  });

  it("runs the server's statements through it: no startup parameters, unnamed statements, the role's search_path", async () => {
    // A database of Postgres's default search_path: the role's setting is what the pooled connections get.
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    await admin.query('ALTER DATABASE ' + new URL(db.url).pathname.slice(1) + ' RESET search_path');
    await admin.end();
    const { failed } = await setPooledSearchPath(db.url, []);
    expect(failed).toEqual([]);
    await transaction?.restart(); // backends opened before the setting keep the old one
    await expect(checkPooledSearchPath('DATABASE_URL', transaction?.url() ?? '')).resolves.toBeUndefined();
    const pool = createPool(transaction?.url() ?? '', { applicationName: 'topology-test', max: 6, statementTimeoutMs: 5_000, client: { options: '-c enable_seqscan=off' }, connection: 'transaction' });
    try {
      // Six clients on two server connections: a named statement would meet its name prepared,
      // or missing, on a backend another client prepared it on.
      const answers = await Promise.all(
        Array.from({ length: 60 }, (_, i) => pool.query<{ n: number }>({ name: 'topology_count', text: 'SELECT count(*)::int + $1::int AS n FROM idempotency_keys', values: [i] })),
      );
      expect(answers.map((answer) => answer.rows[0]?.n)).toEqual(Array.from({ length: 60 }, (_, i) => i));
    } finally {
      await pool.end();
    }
  });

  it("runs sign-in's pool in its role through it, a transaction at a time, and leaves no role behind", async () => {
    const url = transaction?.url() ?? '';
    const auth = createPool(url, { applicationName: 'topology-auth', max: 3, role: AUTH_ROLE, connection: 'transaction' });
    const plain = createPool(url, { applicationName: 'topology-plain', max: 3, connection: 'transaction' });
    try {
      const roles = await Promise.all(Array.from({ length: 12 }, () => auth.query<{ role: string }>('SELECT current_user AS role')));
      expect(new Set(roles.map((answer) => answer.rows[0]?.role))).toEqual(new Set([AUTH_ROLE]));
      const client = await auth.connect();
      try {
        await client.query('BEGIN');
        expect((await client.query<{ role: string }>('SELECT current_user AS role')).rows[0]?.role).toBe(AUTH_ROLE);
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      // The pooler's two server connections, used by sign-in's pool just now, are the owner's again.
      const owners = await Promise.all(Array.from({ length: 12 }, () => plain.query<{ role: string }>('SELECT current_user AS role')));
      expect(new Set(owners.map((answer) => answer.rows[0]?.role))).toEqual(new Set([decodeURIComponent(new URL(db.url).username)]));
    } finally {
      await auth.end();
      await plain.end();
    }
  });
});
