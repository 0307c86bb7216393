import { spawnSync } from 'node:child_process';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { readJournal } from '../../db/migrate';
import { verifyPassword } from '../../server/auth/passwords';
import { createTestDatabase, useTestDatabase } from '../helpers/database';

function cli(args: string[], env: Record<string, string>, input = '') {
  const result = spawnSync(process.execPath, ['--conditions=retrysafe-source', '--import', 'tsx', 'server/cli/main.ts', ...args], {
    env: { ...process.env, ...env },
    encoding: 'utf8',
    input,
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe('npm run cli', () => {
  const db = useTestDatabase();

  it('migrate prints one JSON object with what it applied', async () => {
    const result = cli(['migrate'], { DATABASE_URL: db.url });
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({ applied: [], current: (await readJournal()).at(-1)?.tag });
  });

  it('sweep runs one sweep now and prints what it did', async () => {
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, response_status, response_content_type,
         response_ref, completed_at, created_at, expires_at)
       SELECT gen_random_uuid(), 'demo', 'POST /api/v1/payments', 'old-' || i, 'completed', decode(repeat('cd', 32), 'hex'), gen_random_uuid(),
              201, 'application/json', 'pay_x', now(), now() - interval '3 days', now() - interval '1 day'
       FROM generate_series(1, 25) AS i`,
    );
    const result = cli(['sweep'], { DATABASE_URL: db.url });
    expect(result.code).toBe(0);
    const printed = JSON.parse(result.stdout) as { status: string; rowsDeleted: number; runId: number; scopes: { service: string; scope: string; minMarginSeconds: number }[] };
    expect(printed).toMatchObject({ status: 'completed', rowsDeleted: 25 });
    expect(printed.runId).toBeGreaterThan(0);
    // The demo's rows, judged against the demo's policy (which the sweep command creates if missing).
    expect(printed.scopes[0]).toMatchObject({ service: 'demo', scope: 'POST /api/v1/payments' });
    expect(printed.scopes[0]?.minMarginSeconds).toBeGreaterThan(0);
  });

  it('tenant create prints the principal and its API key once', () => {
    const result = cli(['tenant', 'create', 'Acme', 'Corp'], { DATABASE_URL: db.url });
    expect(result.code).toBe(0);
    const printed = JSON.parse(result.stdout) as { principalId: string; apiKey: string };
    expect(printed.principalId).toMatch(/^[0-9a-f-]{36}$/);
    expect(printed.apiKey).toMatch(/^rsk_[A-Za-z0-9_-]{43}$/);
  });

  it('refuses an unknown command with a message on stderr and a non-zero exit', () => {
    const result = cli(['frobnicate'], { DATABASE_URL: db.url });
    expect(result.code).toBe(2);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain('unknown command: frobnicate');
  });

  it('refuses an invalid DATABASE_URL without echoing it', () => {
    const result = cli(['migrate'], { DATABASE_URL: 'mysql://user:hunter2@host/db' });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('DATABASE_URL');
    expect(result.stderr).not.toContain('hunter2');
  });

  it('user create makes an operator and prints it; bad input is a usage error', async () => {
    const result = cli(['user', 'create', '--email', 'Compliance@Example.com', '--password', 'a long enough secret', '--role', 'compliance'], { DATABASE_URL: db.url });
    expect(result.code).toBe(0);
    const printed = JSON.parse(result.stdout) as { id: string; email: string; role: string };
    expect(printed).toEqual({ id: expect.any(String) as string, email: 'compliance@example.com', role: 'compliance' });
    expect(result.stdout).not.toContain('a long enough secret');
    // The contract's --password still works, with a warning: it lands in the shell's history.
    expect(result.stderr).toMatch(/warning: --password .*history.*stdin/);
    expect(result.stderr).not.toContain('a long enough secret');
    const { rows } = await db.pool.query<{ role: string }>('SELECT role FROM operators WHERE id = $1', [printed.id]);
    expect(rows[0]?.role).toBe('compliance');
    const bad = cli(['user', 'create', '--email', 'x@example.com', '--password', 'short', '--role', 'root'], { DATABASE_URL: db.url });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--password.*12 characters/);
    expect(bad.stderr).toMatch(/--role/);
    expect(bad.stderr).not.toContain('short');
  });

  it('user create reads the password piped on stdin (no --password, nothing in shell history)', async () => {
    const result = cli(['user', 'create', '--email', 'piped@example.com', '--role', 'viewer'], { DATABASE_URL: db.url }, 'a piped long secret\n');
    expect(result.code).toBe(0);
    expect(result.stderr).not.toContain('warning');
    const printed = JSON.parse(result.stdout) as { id: string; email: string; role: string };
    expect(printed).toMatchObject({ email: 'piped@example.com', role: 'viewer' });
    const { rows } = await db.pool.query<{ password: string }>('SELECT password FROM operator_accounts WHERE user_id = $1', [printed.id]);
    // The line's newline is not part of the password.
    expect(await verifyPassword({ hash: rows[0]?.password ?? '', password: 'a piped long secret' })).toBe(true);
    const empty = cli(['user', 'create', '--email', 'empty@example.com', '--role', 'viewer'], { DATABASE_URL: db.url }, '');
    expect(empty.code).toBe(2);
    expect(empty.stderr).toMatch(/--password/);
  });

  it('print-only commands (db grants, help) leave an empty database untouched', async () => {
    const empty = await createTestDatabase({ empty: true });
    const pool = new pg.Pool({ connectionString: empty.url, max: 1 });
    const relations = async () => {
      const { rows } = await pool.query<{ relations: number }>(
        `SELECT count(*)::int AS relations FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'`,
      );
      return rows[0]?.relations;
    };
    try {
      const grants = cli(['db', 'grants'], { DATABASE_URL: empty.url });
      expect(grants.code).toBe(0);
      expect(JSON.parse(grants.stdout)).toMatchObject({ role: 'retrysafe_dashboard' });
      expect(await relations()).toBe(0);
      const help = cli(['help'], { DATABASE_URL: empty.url });
      expect(help.code).toBe(0);
      expect(JSON.parse(help.stdout)).toMatchObject({ commands: expect.arrayContaining(['migrate', 'db grants', 'help']) as unknown });
      expect(await relations()).toBe(0);
    } finally {
      await pool.end();
      await empty.drop();
    }
  });

  it('db grants prints the dashboard role SQL for a DBA', () => {
    const result = cli(['db', 'grants'], { DATABASE_URL: db.url });
    expect(result.code).toBe(0);
    const printed = JSON.parse(result.stdout) as { role: string; sql: string };
    expect(printed.role).toBe('retrysafe_dashboard');
    // The key table's metadata columns the database has (a format() over the listed ones), in the store's schema.
    expect(printed.sql).toContain("GRANT SELECT (%s) ON retrysafe.idempotency_keys TO retrysafe_dashboard");
    expect(printed.sql).toContain("ARRAY['created_at'");
    expect(printed.sql).not.toMatch(/response_body/);
  });
});
