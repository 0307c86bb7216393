// A database that cannot be reached, or does not answer in time, is a 503 with Retry-After
// within a bounded time, never a 500 and never a hang: through the demo API's real handlers
// and the pools as the server creates them (db/client.ts createPool with its timeouts).
import { createServer, connect, type Server, type Socket } from 'node:net';
import type pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createPool } from '../../db/client';
import { useTestDatabase } from '../helpers/database';
import { createDemoHarness, post } from '../helpers/demo';
import { testPolicy } from '../../packages/store/test/helpers/store';

const PAYMENTS = '/api/v1/payments';
const body = { amount: 500, currency: 'EUR' };

async function listen(server: Server): Promise<number> {
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const address = server.address();
  if (typeof address !== 'object' || address === null) throw new Error('no port');
  return address.port;
}

function withPort(url: string, port: number): string {
  const parsed = new URL(url);
  parsed.hostname = '127.0.0.1';
  parsed.port = String(port);
  return parsed.toString();
}

/** A TCP relay to Postgres that can stop relaying (a partition: connections stay open, nothing arrives). */
async function relayTo(target: URL): Promise<{ port: number; partition(): void; close(): Promise<void> }> {
  let partitioned = false;
  const sockets: Socket[] = [];
  const server = createServer((client) => {
    const upstream = connect(Number(target.port), target.hostname);
    sockets.push(client, upstream);
    client.on('data', (chunk) => (partitioned ? undefined : upstream.write(chunk)));
    upstream.on('data', (chunk) => (partitioned ? undefined : client.write(chunk)));
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
  });
  const port = await listen(server);
  return {
    port,
    partition: () => (partitioned = true),
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((done) => server.close(() => done()));
    },
  };
}

describe('an unavailable database', () => {
  const db = useTestDatabase();
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0)) await cleanup();
  });

  async function answer(pool: pg.Pool, apiKey: string, key: string) {
    const demo = createDemoHarness(pool, { policyFor: () => ({ ...testPolicy, lockTimeoutMs: 5_000 }) });
    const started = performance.now();
    const response = await demo.api.payments(post(PAYMENTS, { apiKey, key, body }));
    return { response, ms: performance.now() - started, problem: (await response.json()) as { type?: string; status?: number } };
  }

  function poolOn(url: string, options: { statementTimeoutMs?: number; queryTimeoutMs?: number } = {}): pg.Pool {
    const pool = createPool(url, { applicationName: 'unavailable-test', max: 2, connectionTimeoutMillis: 500, ...options });
    cleanups.push(() => pool.end());
    return pool;
  }

  it('answers 503 with Retry-After at once when nothing listens on the port', async () => {
    const tenant = await createDemoHarness(db.pool).tenant();
    const closed = createServer();
    const port = await listen(closed);
    await new Promise<void>((done) => closed.close(() => done()));
    const { response, ms, problem } = await answer(poolOn(withPort(db.url, port)), tenant.apiKey, 'closed-port');
    expect(response.status).toBe(503);
    expect(response.headers.get('retry-after')).toBe('2');
    expect(response.headers.get('content-type')).toBe('application/problem+json');
    expect(problem).toMatchObject({ type: 'urn:retrysafe:problem:database-unavailable', status: 503 });
    expect(ms).toBeLessThan(2_000);
  });

  it('answers 503 within the connection timeout when the server accepts but never answers', async () => {
    const tenant = await createDemoHarness(db.pool).tenant();
    const held: Socket[] = [];
    const silent = createServer((socket) => void held.push(socket));
    const port = await listen(silent);
    cleanups.push(async () => {
      for (const socket of held) socket.destroy();
      await new Promise<void>((done) => silent.close(() => done()));
    });
    const { response, ms } = await answer(poolOn(withPort(db.url, port)), tenant.apiKey, 'silent-server');
    expect(response.status).toBe(503);
    expect(response.headers.get('retry-after')).toBe('2');
    expect(ms).toBeLessThan(2_500);
  });

  it('answers 503 within the query timeout when the connection goes silent mid-request (a partition)', async () => {
    const tenant = await createDemoHarness(db.pool).tenant();
    const relay = await relayTo(new URL(db.url));
    cleanups.push(() => relay.close());
    const pool = poolOn(withPort(db.url, relay.port), { queryTimeoutMs: 1_000 });
    // A first request warms the pool's connection through the relay.
    expect((await answer(pool, tenant.apiKey, 'before-partition')).response.status).toBe(201);
    relay.partition();
    const { response, ms } = await answer(pool, tenant.apiKey, 'during-partition');
    expect(response.status).toBe(503);
    expect(response.headers.get('retry-after')).toBe('2');
    expect(ms).toBeLessThan(4_000);
  });

  it('answers 503 when the server cancels a statement at statement_timeout, though the lock wait would go on', async () => {
    const tenant = await createDemoHarness(db.pool).tenant();
    // Another transaction holds the key's row uncommitted: the claim waits on it (the policy allows 5 s).
    const holder = await db.pool.connect();
    cleanups.push(async () => {
      await holder.query('ROLLBACK');
      holder.release();
    });
    await holder.query('BEGIN');
    await holder.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
       VALUES ($1, 'demo', $2, 'held-key', 'in_progress', decode(repeat('00', 32), 'hex'), gen_random_uuid(), now() + interval '1 minute', now() + interval '1 hour')`,
      [tenant.principalId, `POST ${PAYMENTS}`],
    );
    const pool = poolOn(db.url, { statementTimeoutMs: 300 });
    const { response, ms } = await answer(pool, tenant.apiKey, 'held-key');
    expect(response.status).toBe(503);
    expect(response.headers.get('retry-after')).toBe('2');
    expect(ms).toBeLessThan(2_000);
  });
});
