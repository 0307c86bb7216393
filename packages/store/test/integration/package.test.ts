// @retrysafe/store as an adopter gets it: `npm pack` gives a tarball that installs into an empty
// project and runs on plain Node (no tsx, no bundler, nothing else from this repository): every
// subpath loads without its framework installed, and an Express service built on it answers a
// new key with 201 and its retry with the byte-identical replay; with node-redis installed, the
// same with its key records in Redis; with drizzle-orm installed, the store's tables typed
// (@retrysafe/store/drizzle, the one entry that needs it).
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../helpers/database';
import { installPackedStore, run } from '../helpers/packed-store';
import { hasRedis, startRedis } from '../helpers/redis';

const SERVICE = `
import express from 'express';
import { createRetrysafe, jsonResult, problemFor } from '@retrysafe/store';
import { idempotent, problemErrors } from '@retrysafe/store/express';
import * as fetchAdapter from '@retrysafe/store/fetch';
import * as honoAdapter from '@retrysafe/store/hono';
import * as nextAdapter from '@retrysafe/store/next';
import * as fastifyAdapter from '@retrysafe/store/fastify';
import * as postgres from '@retrysafe/store/postgres';

const loaded = {
  fetch: typeof fetchAdapter.idempotent,
  hono: typeof honoAdapter.idempotent,
  next: typeof nextAdapter.idempotentRoute,
  fastify: typeof fastifyAdapter.idempotent,
  postgres: typeof postgres.claimKey,
  keyReads: typeof postgres.PostgresKeyReads,
  problemFor: problemFor(Object.assign(new Error('x'), { name: 'X', code: 'FINGERPRINT_MISMATCH' }))?.status ?? null,
};
const retrysafe = await createRetrysafe({
  connectionString: process.env.DATABASE_URL,
  service: 'orders',
  fingerprintSecret: 'a fingerprint secret of the test',
  responseKeys: 'k1:' + Buffer.alloc(32, 7).toString('base64'),
});
const policy = { scopeMode: 'endpoint', retryWindowMs: 3600000, retentionMs: 7200000, leaseMs: 10000, lockTimeoutMs: 2000, maxResponseBytes: 4096, liveKeyQuota: 1000 };
const input = { safeParse: (value) => (value && typeof value.sku === 'string' ? { success: true, data: value } : { success: false, error: { issues: [{ path: ['sku'], message: 'required' }] } }) };
let runs = 0;
const app = express();
app.post('/orders', express.json(), idempotent(retrysafe.store, {
  endpoint: 'POST /orders', method: 'POST', mode: 'claim-first', policy, maxBodyBytes: 1024, input,
  authenticate: (req) => (/^Bearer ([0-9a-f-]{36})$/.exec(req.headers.authorization ?? '') ?? [])[1] ? { principalId: req.headers.authorization.slice(7) } : null,
  work: async (order) => { runs += 1; return jsonResult(201, { id: 'order-' + runs, sku: order.sku }); },
}));
app.use(problemErrors());
const server = app.listen(0, '127.0.0.1', async () => {
  const url = 'http://127.0.0.1:' + server.address().port + '/orders';
  const send = () => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer ' + process.env.PRINCIPAL, 'idempotency-key': 'order-key-1' }, body: JSON.stringify({ sku: 'A-1' }) });
  const first = await send();
  const firstBody = await first.text();
  const second = await send();
  const secondBody = await second.text();
  server.close();
  await retrysafe.stop();
  process.stdout.write(JSON.stringify({ loaded, runs, first: { status: first.status, body: firstBody }, second: { status: second.status, body: secondBody, replayed: second.headers.get('idempotent-replayed') } }));
});
`;

// The same service with its key records in Redis: the package loads node-redis (an optional peer
// dependency the adopter installs) only when createRetrysafe is given `redis`.
const REDIS_SERVICE = `
import { createRetrysafe } from '@retrysafe/store';
import { recordKey } from '@retrysafe/store/redis';
const retrysafe = await createRetrysafe({
  connectionString: process.env.DATABASE_URL,
  service: 'orders',
  fingerprintSecret: 'a fingerprint secret of the test',
  responseKeys: 'k1:' + Buffer.alloc(32, 7).toString('base64'),
  redis: { url: process.env.REDIS_URL },
});
const policy = { scopeMode: 'endpoint', retryWindowMs: 3600000, retentionMs: 7200000, leaseMs: 10000, lockTimeoutMs: 2000, maxResponseBytes: 4096, liveKeyQuota: 1000 };
let runs = 0;
const call = { principalId: process.env.PRINCIPAL, endpoint: 'POST /orders', method: 'POST', key: 'order-key-1', body: { sku: 'A-1' }, policy, mode: 'claim-first',
  work: async () => { runs += 1; return { status: 201, contentType: 'application/json', body: Buffer.from(JSON.stringify({ id: 'order-' + runs })) }; } };
const first = await retrysafe.store.execute(call);
const second = await retrysafe.store.execute(call);
const policyName = retrysafe.redis.status().memory.policy;
await retrysafe.stop();
process.stdout.write(JSON.stringify({ runs, same: first.body.equals(second.body), replayed: second.replayed, policyName, key: recordKey({ principalId: 'p', service: 'orders', scope: 'POST /orders', key: 'k' }) }));
`;

// A TypeScript adopter on Postgres: everything from the root entry, type-checked with skipLibCheck
// off and mysql2 not installed (the root's declarations must not name mysql2's).
const TYPED_SERVICE = `
import { createRetrysafe, jsonResult, type Retrysafe } from '@retrysafe/store';
const retrysafe: Retrysafe = await createRetrysafe({ connectionString: 'postgres://localhost/x', service: 'orders', fingerprintSecret: 'a fingerprint secret', responseKeys: 'k1:x' });
await retrysafe.store.execute({
  principalId: 'p', endpoint: 'POST /orders', method: 'POST', key: 'k', body: {},
  policy: { scopeMode: 'endpoint', retryWindowMs: 1, retentionMs: 1, leaseMs: 1, lockTimeoutMs: 1, maxResponseBytes: 1, liveKeyQuota: 1 },
  mode: 'transactional',
  work: async ({ db }) => jsonResult(201, { rows: (await db.query('SELECT 1')).rowCount }),
});
`;

// The same adopter with its keys in MySQL (mysql2 installed): the work's context.db is mysql2's.
const TYPED_MYSQL_SERVICE = `
import type { RowDataPacket } from 'mysql2/promise';
import { createRetrysafe, jsonResult } from '@retrysafe/store';
import { migrateMysql } from '@retrysafe/store/mysql';
await migrateMysql('mysql://u:p@localhost/orders');
const retrysafe = await createRetrysafe({ connectionString: 'postgres://localhost/x', mysql: { uri: 'mysql://u:p@localhost/orders' }, service: 'orders', fingerprintSecret: 'a fingerprint secret', responseKeys: 'k1:x' });
await retrysafe.store.execute({
  principalId: 'p', endpoint: 'POST /orders', method: 'POST', key: 'k', body: {},
  policy: { scopeMode: 'endpoint', retryWindowMs: 1, retentionMs: 1, leaseMs: 1, lockTimeoutMs: 1, maxResponseBytes: 1, liveKeyQuota: 1 },
  mode: 'transactional',
  work: async ({ db }) => {
    const [rows] = await db.query<RowDataPacket[]>('SELECT 1 AS one');
    // @ts-expect-error mysql2's query takes no pg-style { text } config
    await db.query({ text: 'SELECT 1' });
    return jsonResult(201, { one: rows[0]?.one as number });
  },
});
`;

// An adopter on Drizzle ORM (drizzle-orm installed): the store's tables, typed, from
// @retrysafe/store/drizzle; here the key the Express service above answered.
const DRIZZLE_READ = `
import { and, eq } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { idempotencyKeys } from '@retrysafe/store/drizzle';
const db = drizzle(process.env.DATABASE_URL);
const keys = await db
  .select({ key: idempotencyKeys.key, state: idempotencyKeys.state, status: idempotencyKeys.responseStatus })
  .from(idempotencyKeys)
  .where(and(eq(idempotencyKeys.service, 'orders'), eq(idempotencyKeys.principalId, process.env.PRINCIPAL)));
await db.$client.end();
process.stdout.write(JSON.stringify(keys));
`;

// The same, type-checked: the columns' types are the store's (state one of three, the body bytes).
const TYPED_DRIZZLE_READ = `
import { eq } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { idempotencyKeys, type ClaimState } from '@retrysafe/store/drizzle';
const db = drizzle('postgres://localhost/x');
const [row] = await db.select().from(idempotencyKeys).where(eq(idempotencyKeys.service, 'orders'));
if (row) {
  const state: ClaimState = row.state;
  const body: Buffer | null = row.responseBody;
  const expires: Date = row.expiresAt;
  // @ts-expect-error the key table has no such column
  console.log(state, body, expires, row.tenant);
}
`;

describe('@retrysafe/store from its tarball', () => {
  // An adopter's database: nothing in it yet, Postgres's default search_path.
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let dir = '';
  let tarball = '';
  // The Express service's tenant: the Drizzle read below finds its key.
  const expressPrincipal = crypto.randomUUID();

  beforeAll(async () => {
    db = await createTestDatabase({ empty: true, searchPath: false });
    dir = await mkdtemp(join(tmpdir(), 'retrysafe-adopter-'));
    tarball = await installPackedStore(dir, 'adopter', ['express@5.3.0']);
  }, 180_000);
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
    await db.drop();
  });

  it('holds built JavaScript and declarations only, and depends on pg and canonicalize alone', async () => {
    const { stdout } = await run('tar', ['-tzf', tarball]);
    const files = stdout.trim().split('\n');
    expect(files).toContain('package/dist/index.js');
    expect(files).toContain('package/dist/index.d.ts');
    expect(files).toContain('package/dist/adapters/express.js');
    expect(files.filter((file) => file.startsWith('package/src/') || file.endsWith('.ts') && !file.endsWith('.d.ts'))).toEqual([]);
    // Its migrations ship with it (the SQL and drizzle-kit's journal; not the snapshots, which only generate).
    expect(files).toContain('package/migrations/meta/_journal.json');
    expect(files).toContain('package/migrations/0000_idempotency_keys.sql');
    expect(files).toContain('package/migrations/0017_own_schema.sql');
    expect(files.filter((file) => file.endsWith('_snapshot.json'))).toEqual([]);
    const { stdout: manifest } = await run('tar', ['-xzOf', tarball, 'package/package.json']);
    const pkg = JSON.parse(manifest) as { dependencies: Record<string, string> };
    expect(Object.keys(pkg.dependencies).sort()).toEqual(['canonicalize', 'pg']);
  });

  it('migrates the database with npx retrysafe migrate, from the package alone', async () => {
    const env = { ...process.env, DATABASE_URL: db.url };
    const first = await run('npx', ['--no-install', 'retrysafe', 'migrate'], { cwd: dir, env, timeout: 60_000 });
    const result = JSON.parse(first.stdout) as { applied: string[]; current: string; folder: string };
    // A fresh database: the baseline (the store alone), which records 0000-0027 as done with it.
    expect(result.applied[0]).toBe('0028_store_baseline');
    expect(result.current).toBe(result.applied.at(-1));
    expect(result.folder).toBe(join(dir, 'node_modules', '@retrysafe', 'store', 'migrations'));
    const again = JSON.parse((await run('npx', ['--no-install', 'retrysafe', 'migrate'], { cwd: dir, env, timeout: 60_000 })).stdout) as { applied: string[] };
    expect(again.applied).toEqual([]);
    // Without a database it says what it needs.
    await expect(run('npx', ['--no-install', 'retrysafe', 'migrate'], { cwd: dir, env: { ...process.env, DATABASE_URL: '' }, timeout: 60_000 })).rejects.toThrow(/DATABASE_URL is not set/);
  });

  it('runs an Express service on plain Node: 201, then the byte-identical replay', async () => {
    await writeFile(join(dir, 'service.mjs'), SERVICE);
    const principal = expressPrincipal;
    const { stdout } = await run(process.execPath, ['service.mjs'], {
      cwd: dir,
      env: { PATH: process.env.PATH, NODE_ENV: 'production', DATABASE_URL: db.url, PRINCIPAL: principal },
      timeout: 60_000,
    });
    const result = JSON.parse(stdout) as {
      loaded: Record<string, unknown>;
      runs: number;
      first: { status: number; body: string };
      second: { status: number; body: string; replayed: string | null };
    };
    expect(result.loaded).toEqual({ fetch: 'function', hono: 'function', next: 'function', fastify: 'function', postgres: 'function', keyReads: 'function', problemFor: 422 });
    expect(result.first.status).toBe(201);
    expect(result.second).toEqual({ status: 201, body: result.first.body, replayed: 'true' });
    expect(result.runs).toBe(1);
  });

  it('type-checks for a TypeScript adopter with skipLibCheck off and no mysql2; with mysql2, context.db is mysql2\'s', async () => {
    // Only what the package's own declarations name: pg's types (@types/pg, the adopter's to install) and Node's.
    await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--silent', '@types/node@20.19.43', '@types/pg@8.23.1'], { cwd: dir });
    const tsc = (project: string) => run(process.execPath, [createRequire(import.meta.url).resolve('typescript/bin/tsc'), '-p', project], { cwd: dir, timeout: 120_000 });
    const tsconfig = (file: string) => JSON.stringify({ compilerOptions: { strict: true, skipLibCheck: false, module: 'nodenext', moduleResolution: 'nodenext', target: 'es2022', noEmit: true, types: ['node'] }, files: [file] });
    await writeFile(join(dir, 'postgres-only.ts'), TYPED_SERVICE);
    await writeFile(join(dir, 'tsconfig.postgres.json'), tsconfig('postgres-only.ts'));
    await expect(tsc('tsconfig.postgres.json')).resolves.toMatchObject({ stdout: '' });
    await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--silent', 'mysql2@3.26.1'], { cwd: dir });
    await writeFile(join(dir, 'mysql.ts'), TYPED_MYSQL_SERVICE);
    await writeFile(join(dir, 'tsconfig.mysql.json'), tsconfig('mysql.ts'));
    await expect(tsc('tsconfig.mysql.json')).resolves.toMatchObject({ stdout: '' });
  }, 240_000);

  it('loads @retrysafe/store/drizzle only where drizzle-orm is installed: then the store\'s tables are typed and queryable', async () => {
    // Without it (an optional peer), that one entry says what it needs; the others load (above).
    await expect(run(process.execPath, ['--input-type=module', '-e', "await import('@retrysafe/store/drizzle')"], { cwd: dir })).rejects.toThrow(/Cannot find (package|module) 'drizzle-orm/);
    await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--silent', 'drizzle-orm@0.45.4'], { cwd: dir });
    await writeFile(join(dir, 'drizzle-read.mjs'), DRIZZLE_READ);
    const { stdout } = await run(process.execPath, ['drizzle-read.mjs'], {
      cwd: dir,
      env: { PATH: process.env.PATH, NODE_ENV: 'production', DATABASE_URL: db.url, PRINCIPAL: expressPrincipal },
      timeout: 60_000,
    });
    expect(JSON.parse(stdout)).toEqual([{ key: 'order-key-1', state: 'completed', status: 201 }]);
    await writeFile(join(dir, 'drizzle-read.ts'), TYPED_DRIZZLE_READ);
    await writeFile(
      join(dir, 'tsconfig.drizzle.json'),
      JSON.stringify({ compilerOptions: { strict: true, skipLibCheck: false, module: 'nodenext', moduleResolution: 'nodenext', target: 'es2022', noEmit: true, types: ['node'] }, files: ['drizzle-read.ts'] }),
    );
    // skipLibCheck off, so the package's declarations are checked too; drizzle-orm 0.45's own do
    // not pass it (its gel, mysql, singlestore and sqlite builders: a Drizzle user has it on), so
    // its errors are left out and every other one counts.
    const { stdout: typeErrors } = await run(process.execPath, [createRequire(import.meta.url).resolve('typescript/bin/tsc'), '-p', 'tsconfig.drizzle.json'], { cwd: dir, timeout: 120_000 }).catch(
      (error: unknown) => ({ stdout: error instanceof Error && 'stdout' in error && typeof error.stdout === 'string' ? error.stdout : String(error) }),
    );
    const errorLines = typeErrors.split('\n').filter((line) => /error TS\d+/.test(line));
    expect(errorLines.filter((line) => !line.startsWith('node_modules/drizzle-orm/'))).toEqual([]);
  }, 240_000);

  it.runIf(hasRedis)('keeps key records in Redis once the adopter installs redis', async () => {
    await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--silent', 'redis@6.4.0'], { cwd: dir });
    await writeFile(join(dir, 'redis-service.mjs'), REDIS_SERVICE);
    const redis = await startRedis();
    try {
      const { stdout } = await run(process.execPath, ['redis-service.mjs'], {
        cwd: dir,
        env: { PATH: process.env.PATH, NODE_ENV: 'production', DATABASE_URL: db.url, REDIS_URL: redis.url, PRINCIPAL: crypto.randomUUID() },
        timeout: 60_000,
      });
      expect(JSON.parse(stdout)).toEqual({ runs: 1, same: true, replayed: true, policyName: 'noeviction', key: 'retrysafe:{p:orders}:12:POST /orders:k' });
    } finally {
      await redis.stop();
    }
  });
});
