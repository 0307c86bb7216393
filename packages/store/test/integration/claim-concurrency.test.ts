// The unique scoped key is the concurrency control: many real connections claiming the
// same key at the same instant, and exactly one of them gets the row.
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimKey, type ClaimValues } from '@retrysafe/store/postgres';
import { useTestDatabase } from '../helpers/database';

const CONNECTIONS = 32;
const ROUNDS = 25;

describe('claim under concurrency', () => {
  const db = useTestDatabase();
  const clients: pg.Client[] = [];

  beforeAll(async () => {
    for (let i = 0; i < CONNECTIONS; i += 1) {
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      clients.push(client);
    }
  });
  afterAll(async () => {
    await Promise.all(clients.map((client) => client.end()));
  });

  const claimFor = (principalId: string, key: string, service = 'demo'): ClaimValues => ({
    principalId,
    service,
    scope: 'POST /api/v1/payments',
    key,
    fingerprint: randomBytes(32),
    correlationId: randomUUID(),
    leaseMs: 30_000,
    retentionMs: 86_400_000,
  });

  it(`grants exactly one of ${CONNECTIONS} simultaneous claims of one scoped key, every round`, async () => {
    const principalId = randomUUID();
    for (let round = 0; round < ROUNDS; round += 1) {
      const key = `retry-${round}`;
      // Every connection is already open, so the 32 inserts reach the server together.
      const results = await Promise.all(clients.map((client) => claimKey(client, claimFor(principalId, key))));
      expect(results.filter((result) => result.claimed)).toHaveLength(1);
    }
    const { rows } = await db.pool.query<{ keys: string; rows: string }>(
      'SELECT count(DISTINCT key) AS keys, count(*) AS rows FROM idempotency_keys WHERE principal_id = $1',
      [principalId],
    );
    expect(rows[0]).toEqual({ keys: String(ROUNDS), rows: String(ROUNDS) });
  });

  it('keeps two principals with the same key string independent', async () => {
    const [a, b] = [randomUUID(), randomUUID()];
    const results = await Promise.all(
      clients.map((client, index) => claimKey(client, claimFor(index % 2 === 0 ? a : b, 'retry-1'))),
    );
    expect(results.filter((result) => result.claimed)).toHaveLength(2);
  });

  it('keeps two services with the same principal and key string independent', async () => {
    const principalId = randomUUID();
    const results = await Promise.all(
      clients.map((client, index) => claimKey(client, claimFor(principalId, 'retry-1', index % 2 === 0 ? 'demo' : 'orders'))),
    );
    expect(results.filter((result) => result.claimed)).toHaveLength(2);
    const { rows } = await db.pool.query<{ service: string }>('SELECT service FROM idempotency_keys WHERE principal_id = $1 ORDER BY service', [principalId]);
    expect(rows).toEqual([{ service: 'demo' }, { service: 'orders' }]);
  });
});
