// createRetrysafe, the composition root an adopting service uses: it opens the pool it is
// given a connection string for, detects the layout, and stop() flushes the flow recorder and
// the quota before closing what it opened (and only that).
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { createRetrysafe, STORE_SCHEMA_VERSION } from '@retrysafe/store';
import { useTestDatabase } from '../helpers/database';
import { jsonResult, testPolicy } from '../helpers/store';

const responseKeys = `k1:${randomBytes(32).toString('base64')}`;

describe('createRetrysafe', () => {
  const db = useTestDatabase();

  it('records the claims of a service and flushes them on stop(), then closes its own pool', async () => {
    const retrysafe = await createRetrysafe({ connectionString: db.url, service: 'orders', fingerprintSecret: randomBytes(32), responseKeys, metricsFlushIntervalMs: 3_600_000 });
    expect(retrysafe.service).toBe('orders');
    const scope = `POST /composition/${randomUUID()}`;
    const principalId = randomUUID();
    for (const key of ['a', 'b', 'a']) {
      await retrysafe.store.execute({ principalId, endpoint: scope, method: 'POST', key, body: { key }, policy: testPolicy, mode: 'claim-first', work: () => Promise.resolve(jsonResult(201, { key })) });
    }
    // Nothing flushed yet (the interval is an hour): stop() must do it.
    const before = await db.pool.query('SELECT 1 FROM flow_counts_minute WHERE scope = $1', [scope]);
    expect(before.rowCount).toBe(0);
    await retrysafe.stop();
    // Counted under the service's name.
    const after = await db.pool.query<{ service: string; outcome: string; count: string }>(
      'SELECT service, outcome, sum(count)::text AS count FROM flow_counts_minute WHERE scope = $1 GROUP BY service, outcome ORDER BY outcome',
      [scope],
    );
    expect(after.rows).toEqual([
      { service: 'orders', outcome: 'new', count: '2' },
      { service: 'orders', outcome: 'replay', count: '1' },
    ]);
    const quota = await db.pool.query<{ service: string; claims: string }>('SELECT service, sum(claims)::text AS claims FROM idempotency_key_usage WHERE scope = $1 GROUP BY service', [scope]);
    expect(quota.rows).toEqual([{ service: 'orders', claims: '2' }]);
    expect(retrysafe.pool.ended).toBe(true);
    await retrysafe.stop(); // a second stop is harmless
  });

  it('leaves a pool it was given open', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    const retrysafe = await createRetrysafe({ pool, service: 'orders', fingerprintSecret: randomBytes(32), responseKeys, quota: false });
    expect(retrysafe.quota).toBeNull();
    await retrysafe.stop();
    expect(pool.ended).toBe(false);
    expect((await pool.query<{ one: number }>('SELECT 1 AS one')).rows[0]?.one).toBe(1);
    await pool.end();
  });

  it('refuses bad secrets and an unmigrated database with a message that says what to do', async () => {
    await expect(createRetrysafe({ connectionString: db.url, service: 'orders', fingerprintSecret: 'short', responseKeys })).rejects.toThrow(/at least 16 bytes/);
    await expect(createRetrysafe({ connectionString: db.url, service: 'orders', fingerprintSecret: randomBytes(32), responseKeys: 'k1:c2hvcnQ=' })).rejects.toThrow(/32 bytes/);
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    const empty = `${inject('runPrefix')}_empty`;
    await admin.query(`CREATE DATABASE ${empty}`);
    await admin.end();
    const url = new URL(db.url);
    url.pathname = `/${empty}`;
    await expect(createRetrysafe({ connectionString: url.toString(), service: 'orders', fingerprintSecret: randomBytes(32), responseKeys })).rejects.toThrow(/no Retrysafe store tables: migrate/);
  });

  it('refuses a store schema older or newer than the package understands, saying which and what to do', async () => {
    const start = () => createRetrysafe({ connectionString: db.url, service: 'orders', fingerprintSecret: randomBytes(32), responseKeys });
    const started = await start();
    await started.stop();
    // Version 11: service starts recorded, the release of a stale claim unaudited (migration 0029).
    expect(STORE_SCHEMA_VERSION).toBe(11);
    try {
      await db.pool.query(`CREATE OR REPLACE FUNCTION retrysafe_store_schema_version() RETURNS integer LANGUAGE sql IMMUTABLE AS 'SELECT ${STORE_SCHEMA_VERSION + 1}'`);
      await expect(start()).rejects.toThrow(/version 12, newer than this @retrysafe\/store understands \(11\): upgrade @retrysafe\/store/);
      // A database migrated before service starts (0027's version 10): older, and what to do.
      await db.pool.query(`CREATE OR REPLACE FUNCTION retrysafe_store_schema_version() RETURNS integer LANGUAGE sql IMMUTABLE AS 'SELECT ${STORE_SCHEMA_VERSION - 1}'`);
      await expect(start()).rejects.toThrow(/version 10, older than this @retrysafe\/store's 11: migrate the database with `npx retrysafe migrate`/);
      await db.pool.query('DROP FUNCTION retrysafe_store_schema_version()');
      await expect(start()).rejects.toThrow(/older than this @retrysafe\/store \(version 11\): migrate the database/);
    } finally {
      await db.pool.query(`CREATE OR REPLACE FUNCTION retrysafe_store_schema_version() RETURNS integer LANGUAGE sql IMMUTABLE AS 'SELECT ${STORE_SCHEMA_VERSION}'`);
    }
  });
});
