// The example service's Redis variant as an outside team runs it (issue 27.5): the tarball, express
// and redis installed into an empty project, `node server.mjs` with BACKEND=redis against a Redis
// of this file's own; the key in Redis, the order row in Postgres (the example's own table), and
// no transaction spanning both. The process is SIGKILLed between the effect (the order row
// committed) and the completion (Redis paused for writes, so the completion cannot land first):
// the reconciler then reports the key as a claim past its lease whose effect is present; the retry
// takes the key over, finds the order its key already made (the orders table's unique key), and
// answers it: one order, never two; the finding then clears.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers/database';
import { installExample, type ExampleProject, type RunningExample } from '../helpers/example-service';
import { hasRedis, startRedis, type TestRedis } from '../../packages/store/test/helpers/redis';

const SERVICE = 'orders-redis-example';

describe.skipIf(!hasRedis)('examples/orders-express with BACKEND=redis, from the tarball', () => {
  const db = useTestDatabase();
  let redis: TestRedis | undefined;
  let project: ExampleProject | undefined;
  let example: RunningExample | undefined;
  let env: Record<string, string>;

  beforeAll(async () => {
    redis = await startRedis();
    project = await installExample(['redis@6.4.0']);
    env = { DATABASE_URL: db.url, BACKEND: 'redis', REDIS_URL: redis.url, SERVICE, LEASE_MS: '2000', RECONCILE_INTERVAL_MS: '1000' };
    example = await project.start(env);
  }, 600_000);

  afterAll(async () => {
    await redis?.command('CLIENT', 'UNPAUSE').catch(() => undefined);
    await project?.remove();
    await redis?.stop();
  }, 120_000);

  const order = (key: string, body: unknown, principalId: string) =>
    fetch(example?.ordersUrl ?? '', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${principalId}`, 'idempotency-key': key },
      body: JSON.stringify(body),
    });
  const ordersOf = async (principalId: string) =>
    (await db.pool.query<{ id: string; sku: string; correlation_id: string }>('SELECT id, sku, correlation_id FROM orders_example.orders WHERE principal_id = $1', [principalId])).rows;
  const findingsOf = async (principalId: string) =>
    (await db.pool.query<{ key: string; kind: string; effect: string; correlation_id: string }>('SELECT key, kind, effect, correlation_id FROM reconcile_findings WHERE principal_id = $1', [principalId])).rows;
  const recordState = async (principalId: string, key: string) => {
    const state = (await redis?.command('HGET', `retrysafe:{${principalId}:${SERVICE}}:${'POST /orders'.length}:POST /orders:${key}`, 'state')) as Buffer | null;
    return state?.toString() ?? null;
  };

  it('keeps the key in Redis and the order in Postgres: a new order 201, its retry replayed byte for byte; the reconciler finds nothing wrong', async () => {
    const principal = randomUUID();
    const first = await order('order-1', { sku: 'BOOK-1', quantity: 2 }, principal);
    expect(first.status).toBe(201);
    const body = await first.text();
    const retry = await order('order-1', { quantity: 2, sku: 'BOOK-1' }, principal);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(await retry.text()).toBe(body);
    expect((await ordersOf(principal)).map((row) => row.id)).toEqual([(JSON.parse(body) as { id: string }).id]);
    expect(await recordState(principal, 'order-1')).toBe('completed');
    expect((await db.pool.query('SELECT 1 FROM idempotency_keys WHERE principal_id = $1', [principal])).rowCount).toBe(0);
    // Runs (every second) have read it, and found its order.
    await expect.poll(async () => (await db.pool.query<{ examined: number }>('SELECT examined FROM reconcile_runs WHERE service = $1', [SERVICE])).rows[0]?.examined ?? 0, { timeout: 30_000 }).toBeGreaterThan(0);
    await new Promise((done) => setTimeout(done, 2_500));
    expect(await findingsOf(principal)).toEqual([]);
  }, 120_000);

  it('after a SIGKILL between the order row and the completion: the reconciler reports a stale claim whose effect is present; the retry answers the same order, never a second; the finding clears', async () => {
    const principal = randomUUID();
    // Hold the orders table so the work's INSERT (after its claim in Redis) waits.
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    let doomed: Promise<unknown> | undefined;
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE orders_example.orders IN SHARE MODE');
      doomed = order('order-crash', { sku: 'LAMP-3', quantity: 1 }, principal).catch((error: unknown) => error);
      const waiting = async () => (await db.pool.query("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO orders_example.orders%'")).rowCount ?? 0;
      await expect.poll(waiting, { timeout: 30_000, interval: 50 }).toBeGreaterThan(0);
      expect(await recordState(principal, 'order-crash')).toBe('in_progress');
      // Redis now refuses writes (they wait): the completion cannot land after the INSERT commits.
      await redis?.command('CLIENT', 'PAUSE', '120000', 'WRITE');
      await holder.query('ROLLBACK');
    } finally {
      await holder.end();
    }
    // The effect is committed...
    await expect.poll(async () => (await ordersOf(principal)).length, { timeout: 30_000, interval: 50 }).toBe(1);
    // ...and the process dies before its completion reaches Redis.
    await example?.kill();
    expect(await doomed).toBeInstanceOf(Error);
    await redis?.command('CLIENT', 'UNPAUSE');
    const [made] = await ordersOf(principal);
    expect(await recordState(principal, 'order-crash')).toBe('in_progress');

    // A new process; its reconciler (every second) finds the claim past its lease (2 s) and its order.
    example = await project?.start(env);
    await expect.poll(() => findingsOf(principal), { timeout: 30_000, interval: 200 }).toEqual([{ key: 'order-crash', kind: 'stale_claim', effect: 'present', correlation_id: made?.correlation_id }]);

    // The retry takes the key over (a new attempt), and the order's unique key makes it find the
    // order the dead attempt made: the same order, answered 201 (not a replay: nothing was stored).
    const retry = await order('order-crash', { sku: 'LAMP-3', quantity: 1 }, principal);
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    const answered = JSON.parse(await retry.text()) as { id: string; sku: string; quantity: number };
    expect(answered).toEqual({ id: made?.id, sku: 'LAMP-3', quantity: 1 });
    const replay = await order('order-crash', { sku: 'LAMP-3', quantity: 1 }, principal);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await ordersOf(principal)).toHaveLength(1);
    expect(await recordState(principal, 'order-crash')).toBe('completed');
    // The key completed and its order exists: the next runs clear the finding.
    await expect.poll(() => findingsOf(principal), { timeout: 30_000, interval: 200 }).toEqual([]);
  }, 180_000);
});
