// Key rotation of stored responses (server/idempotency/key-rotation.ts and
// `npm run cli -- rotate-keys`): live replays never break, rows on unknown keys are
// reported and left, and locked rows are skipped rather than waited on.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { beforeEach, describe, expect, it } from 'vitest';
import { explainPrepared, summarisePlan } from '../../packages/store/test/helpers/plan';
import { rotateResponseKeys, rotationStatementTexts, type RotationSummary } from '../../server/idempotency/key-rotation';
import { ResponseKeyRing, type ResponseKey } from '@retrysafe/store';
import type { IdempotencyStore, IdempotentCall } from '@retrysafe/store';
import { layouts, useTestDatabase } from '../helpers/database';
import { createTestStore, jsonResult, newResponseKey, principal, TEST_SERVICE, testPolicy } from '../../packages/store/test/helpers/store';

const ENDPOINT = 'POST /api/v1/payments';

interface Stored {
  principalId: string;
  key: string;
  body: Buffer;
}

describe.each(layouts)('response key rotation (%s layout)', (layout) => {
  const db = useTestDatabase(layout);
  const secret = randomBytes(32);
  const k1 = newResponseKey('k1');
  const k2 = newResponseKey('k2');
  const storeWith = (keys: ResponseKey[]) => createTestStore(db.pool, { keys, secret, layout }).store;

  const call = (entry: Omit<Stored, 'body'>, mode: IdempotentCall['mode'], work: IdempotentCall['work']): IdempotentCall => ({
    principalId: entry.principalId,
    key: entry.key,
    endpoint: ENDPOINT,
    method: 'POST',
    body: { key: entry.key },
    policy: testPolicy,
    mode,
    work,
  });

  const neverRuns: IdempotentCall['work'] = () => Promise.reject(new Error('a replay ran the work'));

  /** Completes `count` keys through the store, alternating the two modes. */
  async function storeResponses(store: IdempotencyStore, count: number): Promise<Stored[]> {
    const stored: Stored[] = [];
    for (let batch = 0; batch < count; batch += 25) {
      const made = await Promise.all(
        Array.from({ length: Math.min(25, count - batch) }, async (_, offset) => {
          const entry = { principalId: principal(), key: `key-${batch + offset}` };
          const result = jsonResult(201, { id: entry.key, padding: randomBytes(16 + ((batch + offset) % 200)).toString('hex') });
          const mode = (batch + offset) % 2 === 0 ? 'claim-first' : 'transactional';
          await store.execute(call(entry, mode, () => Promise.resolve(result)));
          return { ...entry, body: result.body };
        }),
      );
      stored.push(...made);
    }
    return stored;
  }

  async function replay(store: IdempotencyStore, entry: Stored): Promise<void> {
    const outcome = await store.execute(call(entry, 'claim-first', neverRuns));
    expect(outcome.replayed).toBe(true);
    expect(outcome.body.equals(entry.body)).toBe(true);
  }

  const rowsOnKey = async (keyId: string) =>
    Number((await db.pool.query<{ n: string }>('SELECT count(*) AS n FROM idempotency_keys WHERE response_key_id = $1', [keyId])).rows[0]?.n);

  beforeEach(async () => {
    await db.pool.query('TRUNCATE idempotency_keys');
  });

  it('re-encrypts every row under the new key while replays and new claims run, without a replay failing', async () => {
    const stored = await storeResponses(storeWith([k1]), 300);
    const during = storeWith([k2, k1]);
    let rotating = true;
    const failures: unknown[] = [];
    let replays = 0;
    const replayLoop = async () => {
      while (rotating) {
        const entry = stored[Math.floor(Math.random() * stored.length)];
        if (!entry) throw new Error('no stored entry');
        await replay(during, entry).then(() => (replays += 1), (error: unknown) => failures.push(error));
      }
    };
    let claims = 0;
    const claimLoop = async () => {
      while (rotating) {
        await during
          .execute(call({ principalId: principal(), key: `new-${claims}` }, 'claim-first', () => Promise.resolve(jsonResult(201, { fresh: true }))))
          .then(() => (claims += 1), (error: unknown) => failures.push(error));
      }
    };
    const traffic = [...Array.from({ length: 6 }, replayLoop), claimLoop(), claimLoop()];
    // Small chunks, so the run spans many transactions for the traffic to interleave with.
    const summary = await rotateResponseKeys(db.pool, new ResponseKeyRing([k2, k1]), TEST_SERVICE, { chunkSize: 20 }).finally(() => (rotating = false));
    await Promise.all(traffic);

    expect(failures).toEqual([]);
    expect(replays).toBeGreaterThan(20);
    expect(claims).toBeGreaterThan(0);
    expect(summary).toMatchObject({ service: TEST_SERVICE, keyId: 'k2', rowsRotated: 300, remainingOnOldKeys: [], unreadable: [], oldKeysDroppable: true, otherServices: [] });
    expect(summary.chunks).toBeGreaterThanOrEqual(15);
    expect(await rowsOnKey('k1')).toBe(0);

    const after = storeWith([k2]);
    for (const entry of stored) await replay(after, entry);
  });

  it('reports a row under a key id the ring does not have, and leaves it', async () => {
    const [lost] = await storeResponses(storeWith([newResponseKey('gone')]), 1);
    await storeResponses(storeWith([k1]), 5);

    const summary = await rotateResponseKeys(db.pool, new ResponseKeyRing([k2, k1]), TEST_SERVICE);

    expect(summary).toMatchObject({ rowsRotated: 5, remainingOnOldKeys: [], unreadable: [{ keyId: 'gone', rows: 1 }], oldKeysDroppable: true, otherServices: [] });
    const { rows } = await db.pool.query<{ response_key_id: string }>('SELECT response_key_id FROM idempotency_keys WHERE principal_id = $1', [
      lost?.principalId,
    ]);
    expect(rows).toEqual([{ response_key_id: 'gone' }]);
  });

  it('skips a row locked by an open transaction instead of waiting, and rotates it on the next run', async () => {
    const stored = await storeResponses(storeWith([k1]), 30);
    const held = stored[7];
    if (!held) throw new Error('no stored entry');
    const holder = await db.pool.connect();
    let first: RotationSummary;
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM idempotency_keys WHERE principal_id = $1 AND key = $2 FOR UPDATE', [held.principalId, held.key]);
      const started = performance.now();
      first = await rotateResponseKeys(db.pool, new ResponseKeyRing([k2, k1]), TEST_SERVICE, { chunkSize: 10 });
      expect(performance.now() - started).toBeLessThan(2_000);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    expect(first).toMatchObject({ rowsRotated: 29, remainingOnOldKeys: [{ keyId: 'k1', rows: 1 }], unreadable: [], oldKeysDroppable: false });

    const second = await rotateResponseKeys(db.pool, new ResponseKeyRing([k2, k1]), TEST_SERVICE);
    expect(second).toMatchObject({ rowsRotated: 1, remainingOnOldKeys: [], oldKeysDroppable: true });
    await replay(storeWith([k2]), held);
  });

  it('walks the table by a range scan of the primary key', async () => {
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, response_status,
         response_content_type, response_body, response_key_id, completed_at, expires_at, created_at)
       SELECT ('00000000-0000-0000-0000-' || lpad((i % 1000)::text, 12, '0'))::uuid, CASE WHEN i % 4 = 0 THEN 'orders' ELSE 'demo' END, $1, 'key-' || i, 'completed',
              decode(md5(i::text) || md5(i::text), 'hex'), gen_random_uuid(), 201, 'application/json', '\\x00'::bytea, 'k1',
              now(), now() + interval '1 hour' + (i % 86400) * interval '1 second', now() - interval '1 minute'
       FROM generate_series(1, 50000) AS i`,
      [ENDPOINT],
    );
    await db.pool.query('ANALYZE idempotency_keys');
    const text = layout === 'partitioned' ? rotationStatementTexts.partitionedLockChunk : rotationStatementTexts.lockChunk;
    // The cursor (principal, service, scope, key), the service rotated, and in the partitioned layout the cursor's expires_at.
    const at = (principalId: string, service: string, scope: string, key: string) => [principalId, service, scope, key, 'demo', ...(layout === 'partitioned' ? ['-infinity'] : [])];
    const client = await db.pool.connect();
    try {
      // The first chunk (from before every row) and one from the middle. The chunk statement is
      // unnamed, so it always runs with a plan made for its values.
      for (const cursor of [at('00000000-0000-0000-0000-000000000000', '', '', ''), at('00000000-0000-0000-0000-000000000500', 'demo', ENDPOINT, 'key-500')]) {
        const nodes = await explainPrepared(client, text, ['k2', 500, ...cursor], 'force_custom_plan');
        expect(summarisePlan(nodes)).toMatch(/^Index Scan idempotency_keys(_p\d{8})?_pkey/);
        expect(nodes.map((node) => node['Node Type'])).not.toContain('Sort');
        expect(summarisePlan(nodes)).not.toContain('Seq Scan');
      }
    } finally {
      client.release();
    }
  });

  it('npm run cli -- rotate-keys prints one JSON object and exits 0', async () => {
    await storeResponses(storeWith([k1]), 12);
    const encode = (key: ResponseKey) => `${key.id}:${key.key.toString('base64')}`;
    const result = spawnSync(process.execPath, ['--conditions=retrysafe-source', '--import', 'tsx', 'server/cli/main.ts', 'rotate-keys'], {
      env: { ...process.env, DATABASE_URL: db.url, RESPONSE_ENCRYPTION_KEYS: `${encode(k2)},${encode(k1)}` },
      encoding: 'utf8',
    });
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    expect(result.stdout.trim().split('\n')).toHaveLength(1);
    // Without --service: the demo's rows (this server's own service).
    expect(JSON.parse(result.stdout)).toMatchObject({ service: 'demo', keyId: 'k2', rowsRotated: 12, remainingOnOldKeys: [], unreadable: [], oldKeysDroppable: true, otherServices: [] });
    expect(await rowsOnKey('k1')).toBe(0);
  });
});
