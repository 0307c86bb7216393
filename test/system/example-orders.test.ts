// The example service as an outside team runs it (#14 point 6): the @retrysafe/store tarball
// and express installed into an empty project (nothing else from this repository), the example's
// server.mjs copied there and started with `node server.mjs` against the database the Retrysafe
// server (`npm start`'s script) uses. Orders with retries, concurrent duplicates and bad input
// answer the demo API's status table, and the dashboard shows them: the overview under the
// service `orders`, and the key lookup for that principal and key.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { copyFile, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../db/embedded';
import { DATA_DIR } from '../../db/database-url';
import { withFileLock } from '../../db/file-lock';
import { useTestDatabase } from '../helpers/database';
import { signInEveryRole } from '../helpers/operators';
import { startServer, type RunningServer } from '../helpers/server';

const run = promisify(execFile);
const ROOT = resolve(import.meta.dirname, '../..');

describe('examples/orders-express from the tarball, on the dashboard', () => {
  const db = useTestDatabase();
  let dir = '';
  let dashboard: RunningServer | undefined;
  let example: ChildProcess | undefined;
  let exampleOutput = '';
  let ordersUrl = '';

  beforeAll(async () => {
    dashboard = await startServer(db.url, { DEMO_TRAFFIC: '0' });
    dir = await mkdtemp(join(tmpdir(), 'retrysafe-orders-'));
    // npm pack rebuilds dist/ (prepack): one pack at a time, so a run beside this one (CI runs two
    // suites at once) never packs a file the other's build is rewriting.
    await withFileLock(join(DATA_DIR, 'pack'), () => run('npm', ['pack', '-w', '@retrysafe/store', '--pack-destination', dir, '--silent'], { cwd: ROOT }));
    const tarball = (await readdir(dir)).find((name) => name.endsWith('.tgz'));
    if (!tarball) throw new Error('npm pack wrote no tarball');
    await writeFile(join(dir, 'package.json'), JSON.stringify({ name: 'orders', private: true, type: 'module' }));
    await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--silent', join(dir, tarball), 'express@5.3.0'], { cwd: dir });
    await copyFile(join(ROOT, 'examples/orders-express/server.mjs'), join(dir, 'server.mjs'));
    // docs/adopting.md's step before the first start: the store's migrations, from the installed package
    // (the Retrysafe server migrated this database already: nothing to do, and no error).
    const migrated = await run('npx', ['--no-install', 'retrysafe', 'migrate'], { cwd: dir, env: { ...process.env, DATABASE_URL: db.url } });
    expect((JSON.parse(migrated.stdout) as { applied: string[] }).applied).toEqual([]);
    const port = await freePort();
    const child: ChildProcess = spawn(process.execPath, ['server.mjs'], {
      cwd: dir,
      // Only what the example documents: no tsx, no source conditions, nothing of this repository.
      env: {
        PATH: process.env.PATH ?? '',
        NODE_ENV: 'production',
        DATABASE_URL: db.url,
        PORT: String(port),
        IDEMPOTENCY_SECRET: randomBytes(32).toString('base64url'),
        RESPONSE_ENCRYPTION_KEYS: `o1:${randomBytes(32).toString('base64')}`,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    example = child;
    ordersUrl = `http://127.0.0.1:${port}/orders`;
    await new Promise<void>((ready, failed) => {
      const timer = setTimeout(() => failed(new Error(`the example did not start: ${exampleOutput}`)), 30_000);
      const seen = (chunk: Buffer) => {
        exampleOutput += chunk.toString();
        if (exampleOutput.includes('orders service')) {
          clearTimeout(timer);
          ready();
        }
      };
      child.stdout?.on('data', seen);
      child.stderr?.on('data', seen);
      child.once('exit', (code: number | null) => failed(new Error(`the example exited with ${code}: ${exampleOutput}`)));
    });
  }, 600_000);

  afterAll(async () => {
    if (example && example.exitCode === null) {
      example.kill('SIGTERM');
      await new Promise((done) => example?.once('exit', done));
    }
    await dashboard?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const principal = randomUUID();
  const order = (key: string, body: unknown, principalId = principal) =>
    fetch(ordersUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${principalId}`, 'idempotency-key': key },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });

  it('answers orders, retries, duplicates and bad input as the contract says, and shows them on the dashboard', async () => {
    const first = await order('order-1', { sku: 'BOOK-1', quantity: 2 });
    expect(first.status).toBe(201);
    const firstBody = await first.text();
    expect(JSON.parse(firstBody)).toMatchObject({ sku: 'BOOK-1', quantity: 2, id: expect.any(String) as string });
    const correlationId = first.headers.get('x-correlation-id');

    // A retry (same body, key order and spacing changed) is the original, byte for byte.
    const retry = await order('order-1', '{ "quantity": 2,  "sku": "BOOK-1" }');
    expect(retry.status).toBe(201);
    expect(await retry.text()).toBe(firstBody);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.headers.get('x-correlation-id')).toBe(correlationId);

    // Concurrent duplicates of a new key: exactly one runs; the others replay it or wait (409).
    const burst = await Promise.all(Array.from({ length: 8 }, () => order('order-2', { sku: 'PEN-9', quantity: 1 })));
    const bodies = await Promise.all(burst.map((response) => response.text()));
    const created = burst.filter((response) => response.status === 201 && response.headers.get('idempotent-replayed') !== 'true');
    expect(created).toHaveLength(1);
    for (const [index, response] of burst.entries()) {
      expect([201, 409]).toContain(response.status);
      if (response.status === 409) expect(Number(response.headers.get('retry-after'))).toBeGreaterThan(0);
      if (response.status === 201) expect(bodies[index]).toBe(bodies[burst.indexOf(created[0] as Response)]);
    }

    expect((await order('order-1', { sku: 'BOOK-1', quantity: 3 })).status).toBe(422);
    expect((await order('bad key', { sku: 'BOOK-1', quantity: 1 })).status).toBe(400);
    const invalid = await order('order-3', { sku: '', quantity: 0 });
    expect(invalid.status).toBe(400);
    expect(invalid.headers.get('content-type')).toContain('application/problem+json');
    expect((await order('order-4', { sku: 'X'.repeat(20_000), quantity: 1 })).status).toBe(413);
    expect((await fetch(ordersUrl, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': 'k' }, body: '{}' })).status).toBe(401);

    // A graceful stop flushes the service's flow counts to the shared buckets.
    example?.kill('SIGTERM');
    await new Promise((done) => example?.once('exit', done));

    if (!dashboard) throw new Error('no dashboard');
    const cookies = await signInEveryRole(db, dashboard.baseUrl, 'orders.example');
    const cookie = cookies.get('operator') ?? '';
    const overview = await fetch(`${dashboard.baseUrl}/api/admin/overview?range=1h&service=orders`, { headers: { cookie } });
    expect(overview.status).toBe(200);
    const data = (await overview.json()) as { service: string; services: string[]; scopes: string[]; flow: { counts: Record<string, number> }[] };
    expect(data.service).toBe('orders');
    expect(data.services).toContain('orders');
    expect(data.scopes).toEqual(['POST /orders']);
    const total = (outcome: string) => data.flow.reduce((sum, point) => sum + (point.counts[outcome] ?? 0), 0);
    expect(total('new')).toBe(2);
    expect(total('mismatch')).toBe(1);
    expect(total('replay') + total('conflict')).toBe(1 + 7);

    const lookup = await fetch(`${dashboard.baseUrl}/api/admin/keys/lookup`, {
      method: 'POST',
      headers: { cookie, 'content-type': 'application/json', origin: dashboard.baseUrl },
      body: JSON.stringify({ principalId: principal, service: 'orders', key: 'order-1', reason: 'example service test' }),
    });
    expect(lookup.status).toBe(200);
    const { records } = (await lookup.json()) as { records: { service: string; scope: string; state: string; statusCode: number; correlationId: string }[] };
    expect(records).toEqual([expect.objectContaining({ service: 'orders', scope: 'POST /orders', state: 'completed', statusCode: 201, correlationId })]);
    // The service's policy was created from its default and is on the retention review.
    const retention = await fetch(`${dashboard.baseUrl}/api/admin/retention`, { headers: { cookie: cookies.get('compliance') ?? '' } });
    const review = (await retention.json()) as { policies: { service: string; endpoint: string; retryWindowSeconds: number }[] };
    expect(review.policies).toContainEqual(expect.objectContaining({ service: 'orders', endpoint: 'POST /orders', retryWindowSeconds: 86_400 }));
  }, 120_000);
});
