// A transactional request holds its connection while the endpoint's work runs; if the database
// drops that connection meanwhile (a restart, a killed backend), the request fails and the
// service goes on: no uncaught 'error' event (which would end the process), the broken
// connection is discarded, and the next request succeeds. Whether the pool is the store's own
// or one the adopter passed in with no listeners of its own.
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createRetrysafe, type Retrysafe } from '@retrysafe/store';
import { useTestDatabase } from '../helpers/database';
import { jsonResult, sleep, testPolicy } from '../helpers/store';

const responseKeys = `k1:${randomBytes(32).toString('base64')}`;

describe('a connection lost during the work of a transactional request', () => {
  const db = useTestDatabase();

  async function loseConnectionDuringWork(retrysafe: Retrysafe): Promise<void> {
    const principalId = randomUUID();
    const endpoint = `POST /lost/${randomUUID()}`;
    const request = (key: string, work: Parameters<Retrysafe['store']['execute']>[0]['work']) =>
      retrysafe.store.execute({ principalId, endpoint, method: 'POST', key, body: { key }, policy: testPolicy, mode: 'transactional', work });
    const failed = request('lost', async (context) => {
      const { rows } = await context.db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      await db.pool.query('SELECT pg_terminate_backend($1)', [rows[0]?.pid]);
      // The connection dies while nothing runs on it: its error arrives as an event.
      await sleep(300);
      return jsonResult(201, { ok: true });
    });
    await expect(failed).rejects.toThrow();
    // Nothing of the request was kept: the key can be used again, and the pool still serves.
    const retried = await request('lost', () => Promise.resolve(jsonResult(201, { retried: true })));
    expect(retried.status).toBe(201);
    const next = await request('next', () => Promise.resolve(jsonResult(201, { next: true })));
    expect(next.status).toBe(201);
  }

  it("on the store's own pool", async () => {
    const errors: string[] = [];
    const retrysafe = await createRetrysafe({ connectionString: db.url, service: 'lost', fingerprintSecret: randomBytes(32), responseKeys, quota: false, onError: (error) => errors.push(error instanceof Error ? error.message : String(error)) });
    try {
      await loseConnectionDuringWork(retrysafe);
    } finally {
      await retrysafe.stop();
    }
  });

  it("on an adopter's pool without listeners", async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 4 });
    const retrysafe = await createRetrysafe({ pool, service: 'lost', fingerprintSecret: randomBytes(32), responseKeys, quota: false });
    try {
      await loseConnectionDuringWork(retrysafe);
    } finally {
      await retrysafe.stop();
      await pool.end();
    }
  });
});
