// Key rotation per service (#14 point 7): rotate-keys, given one service's keys, re-encrypts that
// service's rows only. Another service's rows, sealed under that service's own keys (here even
// under the same key id, "k1", with other key material), are never opened: they stay byte for
// byte as they were, still replay for their own service, and are reported apart under
// `otherServices`, not as unreadable. Both services use the same principals and keys, so their
// rows interleave in the primary key's order that the rotation walks.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { beforeEach, describe, expect, it } from 'vitest';
import { ResponseKeyRing, type IdempotencyStore, type IdempotentCall, type ResponseKey } from '@retrysafe/store';
import { rotateResponseKeys } from '../../server/idempotency/key-rotation';
import { layouts, useTestDatabase } from '../helpers/database';
import { createTestStore, jsonResult, newResponseKey, principal, testPolicy } from '../../packages/store/test/helpers/store';

const ENDPOINT = 'POST /orders';
const A = 'orders';
const B = 'billing';

interface Stored {
  principalId: string;
  key: string;
  body: Buffer;
}

interface SealedRow {
  principal_id: string;
  key: string;
  response_key_id: string;
  response_body: Buffer;
}

describe.each(layouts)('response key rotation per service (%s layout)', (layout) => {
  const db = useTestDatabase(layout);
  const secret = randomBytes(32);
  // Service A rotates from its k1 to its k2; service B has a k1 of its own (same id, other key).
  const a1 = newResponseKey('k1');
  const a2 = newResponseKey('k2');
  const b1 = newResponseKey('k1');
  const storeOf = (service: string, keys: ResponseKey[]) => createTestStore(db.pool, { service, keys, secret, layout }).store;

  const call = (entry: { principalId: string; key: string }, work: IdempotentCall['work']): IdempotentCall => ({
    principalId: entry.principalId,
    key: entry.key,
    endpoint: ENDPOINT,
    method: 'POST',
    body: { key: entry.key },
    policy: testPolicy,
    mode: 'claim-first',
    work,
  });

  /** Completes one key per principal through `store`, with a response naming `service`. */
  async function storeResponses(store: IdempotencyStore, service: string, principals: string[]): Promise<Stored[]> {
    return Promise.all(
      principals.map(async (principalId, index) => {
        const entry = { principalId, key: `order-${index}` };
        const result = jsonResult(201, { service, key: entry.key, padding: randomBytes(8 + (index % 50)).toString('hex') });
        const outcome = await store.execute(call(entry, () => Promise.resolve(result)));
        expect(outcome.replayed).toBe(false);
        return { ...entry, body: result.body };
      }),
    );
  }

  async function expectReplays(store: IdempotencyStore, stored: Stored[]): Promise<void> {
    for (const entry of stored) {
      const outcome = await store.execute(call(entry, () => Promise.reject(new Error('a replay ran the work'))));
      expect(outcome.replayed).toBe(true);
      expect(outcome.body.equals(entry.body)).toBe(true);
    }
  }

  const sealedRows = async (service: string) =>
    (
      await db.pool.query<SealedRow>(
        'SELECT principal_id, key, response_key_id, response_body FROM idempotency_keys WHERE service = $1 ORDER BY principal_id, key',
        [service],
      )
    ).rows;

  beforeEach(async () => {
    await db.pool.query('TRUNCATE idempotency_keys');
  });

  it('re-encrypts only the given service’s rows and reports the other service’s apart, untouched and still readable by it', async () => {
    // The same 40 principals and keys in both services.
    const principals = Array.from({ length: 40 }, () => principal());
    const storedA = await storeResponses(storeOf(A, [a1]), A, principals);
    const storedB = await storeResponses(storeOf(B, [b1]), B, principals);
    const before = await sealedRows(B);
    expect(before).toHaveLength(40);
    expect(new Set(before.map((row) => row.response_key_id))).toEqual(new Set(['k1']));

    // Small chunks: the walk crosses the other service's rows many times.
    const summary = await rotateResponseKeys(db.pool, new ResponseKeyRing([a2, a1]), A, { chunkSize: 7 });

    expect(summary).toMatchObject({
      service: A,
      keyId: 'k2',
      rowsRotated: 40,
      remainingOnOldKeys: [],
      unreadable: [],
      oldKeysDroppable: true,
      otherServices: [{ service: B, keyId: 'k1', rows: 40 }],
    });
    expect(summary.chunks).toBeGreaterThanOrEqual(6);
    // A's rows are all under its new key, and open with it alone.
    expect(new Set((await sealedRows(A)).map((row) => row.response_key_id))).toEqual(new Set(['k2']));
    await expectReplays(storeOf(A, [a2]), storedA);
    // B's rows: the same bytes under the same key id, and B (with only its own key) replays them.
    expect(await sealedRows(B)).toEqual(before);
    await expectReplays(storeOf(B, [b1]), storedB);
  });

  it('still reports its own service’s rows on an unknown key as unreadable, and only those', async () => {
    const principals = Array.from({ length: 5 }, () => principal());
    await storeResponses(storeOf(A, [a1]), A, principals);
    const [lost] = await storeResponses(storeOf(A, [newResponseKey('gone')]), A, [principal()]);
    // The other service's rows under a key id A does not have either.
    await storeResponses(storeOf(B, [newResponseKey('gone')]), B, principals);
    await storeResponses(storeOf(B, [b1]), B, [principal(), principal()]);

    const summary = await rotateResponseKeys(db.pool, new ResponseKeyRing([a2, a1]), A);

    expect(summary).toMatchObject({
      service: A,
      rowsRotated: 5,
      remainingOnOldKeys: [],
      unreadable: [{ keyId: 'gone', rows: 1 }],
      oldKeysDroppable: true,
      otherServices: [
        { service: B, keyId: 'gone', rows: 5 },
        { service: B, keyId: 'k1', rows: 2 },
      ],
    });
    const { rows } = await db.pool.query<{ response_key_id: string }>('SELECT response_key_id FROM idempotency_keys WHERE service = $1 AND principal_id = $2', [
      A,
      lost?.principalId,
    ]);
    expect(rows).toEqual([{ response_key_id: 'gone' }]);
  });

  it('then rotates the other service with its own keys, leaving the first alone', async () => {
    const principals = Array.from({ length: 12 }, () => principal());
    const storedA = await storeResponses(storeOf(A, [a1]), A, principals);
    const storedB = await storeResponses(storeOf(B, [b1]), B, principals);
    const first = await rotateResponseKeys(db.pool, new ResponseKeyRing([a2, a1]), A);
    expect(first).toMatchObject({ rowsRotated: 12, otherServices: [{ service: B, keyId: 'k1', rows: 12 }] });
    const rotatedA = await sealedRows(A);

    // B rotates to a k2 of its own; A's rows are already on a key id "k2" (A's), so none is listed apart.
    const b2 = newResponseKey('k2');
    const second = await rotateResponseKeys(db.pool, new ResponseKeyRing([b2, b1]), B);
    expect(second).toMatchObject({ service: B, keyId: 'k2', rowsRotated: 12, remainingOnOldKeys: [], unreadable: [], oldKeysDroppable: true, otherServices: [] });
    expect(await sealedRows(A)).toEqual(rotatedA);
    await expectReplays(storeOf(A, [a2]), storedA);
    await expectReplays(storeOf(B, [b2]), storedB);
  });

  it('npm run cli -- rotate-keys --service rotates that service with the keys it is given', async () => {
    const principals = Array.from({ length: 6 }, () => principal());
    const storedA = await storeResponses(storeOf(A, [a1]), A, principals);
    const storedB = await storeResponses(storeOf(B, [b1]), B, principals);
    const before = await sealedRows(B);
    const encode = (key: ResponseKey) => `${key.id}:${key.key.toString('base64')}`;
    const cli = (args: string[]) =>
      spawnSync(process.execPath, ['--conditions=retrysafe-source', '--import', 'tsx', 'server/cli/main.ts', 'rotate-keys', ...args], {
        env: { ...process.env, DATABASE_URL: db.url, RESPONSE_ENCRYPTION_KEYS: `${encode(a2)},${encode(a1)}` },
        encoding: 'utf8',
      });

    const refused = cli(['--service', 'Not A Service']);
    expect(refused.status).toBe(2);
    expect(refused.stderr).toContain('--service');

    const result = cli(['--service', A]);
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    expect(result.stdout.trim().split('\n')).toHaveLength(1);
    expect(JSON.parse(result.stdout)).toMatchObject({
      service: A,
      keyId: 'k2',
      rowsRotated: 6,
      remainingOnOldKeys: [],
      unreadable: [],
      oldKeysDroppable: true,
      otherServices: [{ service: B, keyId: 'k1', rows: 6 }],
    });
    expect(await sealedRows(B)).toEqual(before);
    await expectReplays(storeOf(A, [a2]), storedA);
    await expectReplays(storeOf(B, [b1]), storedB);
  });
});
