// The Redis backend fences a completion and a failure mark by the claim's correlation id as well as
// its attempt number. Replication is asynchronous, so a failover can leave two records of one key
// with the same attempt number, each another request's claim: a master that stalled or restarted
// and still believes it masters the slot runs a claim on its stale data (where the key is new:
// attempt 1), while the promoted replica holds another request's claim, attempt 1 too, whose work
// runs. The stale claim is then refused (its WAIT finds no replica) and marked failed; should the
// client deliver that mark to the promoted replica (the slot moved in between), an attempt-only
// fence would fail the running claim, and the next retry would run the work a second time.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotentCall } from '@retrysafe/store';
import { recordKey, RedisBackend } from '@retrysafe/store/redis';
import { useTestDatabase } from '../helpers/database';
import { hasRedis, startRedis, type TestRedis } from '../helpers/redis';
import { createTestStore, jsonResult, principal, TEST_SERVICE, testPolicy } from '../helpers/store';

const ENDPOINT = 'POST /orders';

describe.runIf(hasRedis)('Redis: completions and failure marks fenced by the claim, not only its attempt number', () => {
  const db = useTestDatabase();
  let redis: TestRedis | undefined;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  const identity = (principalId: string, key: string) => ({ principalId, service: TEST_SERVICE, scope: ENDPOINT, key });
  const fields = async (principalId: string, key: string) => {
    const [state, attempts, cid] = (await redis?.command('HMGET', recordKey(identity(principalId, key)), 'state', 'att', 'cid')) as (Buffer | null)[];
    return { state: state?.toString(), attempts: Number(attempts?.toString()), cid: cid?.toString() };
  };

  it("leaves alone a claim of the same attempt number made by another request: neither its failure mark nor its completion applies", async () => {
    if (!redis) throw new Error('no redis');
    const backend = new RedisBackend(redis.connection.commands);
    const p = principal();
    const claim = { ...identity(p, 'k'), fingerprint: Buffer.alloc(32, 1), correlationId: 'running-claim', leaseMs: 60_000, retentionMs: 3_600_000 };
    expect(await backend.claim(claim)).toEqual({ claimed: true, attempts: 1 });

    // The other claim's marks: attempt 1 as well, another correlation id.
    expect(await backend.fail({ ...identity(p, 'k'), correlationId: 'stale-claim' }, 1)).toBe(false);
    const completion = { ...identity(p, 'k'), attempts: 1, status: 201, contentType: 'application/json', body: null, keyId: null, size: 2, reference: 'r1' };
    expect(await backend.complete({ ...completion, correlationId: 'stale-claim' })).toBe(false);
    expect(await fields(p, 'k')).toEqual({ state: 'in_progress', attempts: 1, cid: 'running-claim' });

    // The claim's own completion applies.
    expect(await backend.complete({ ...completion, correlationId: 'running-claim' })).toBe(true);
    expect((await fields(p, 'k')).state).toBe('completed');

    // Without a correlation id (an operator's release of a stale claim), the attempt number fences alone.
    const other = { ...claim, ...identity(p, 'k2') };
    await backend.claim(other);
    expect(await backend.fail(identity(p, 'k2'), 2)).toBe(false);
    expect(await backend.fail(identity(p, 'k2'), 1)).toBe(true);
    expect((await fields(p, 'k2')).state).toBe('failed');
  });

  it("the store sends the claim's correlation id: a record that became another claim's (same attempt) is not completed by this one", async () => {
    if (!redis) throw new Error('no redis');
    const backend = new RedisBackend(redis.connection.commands, { db: db.pool });
    const lost: string[] = [];
    const { store } = createTestStore(db.pool, { backend, onLeaseLost: (claim) => lost.push(claim.key) });
    const p = principal();
    const call: Omit<IdempotentCall, 'work' | 'mode'> = { principalId: p, key: 'k', endpoint: ENDPOINT, method: 'POST', body: { amount: 5 }, policy: testPolicy };
    const begun = await store.begin(call);
    if (!begun.claimed) throw new Error('expected a claim');
    // What a failover can leave: the key's record, attempt 1, is another request's claim.
    await redis.command('HSET', recordKey(identity(p, 'k')), 'cid', 'another-claim');
    await begun.finish(jsonResult(201, { ok: true }));
    expect(lost).toEqual(['k']);
    expect(await fields(p, 'k')).toEqual({ state: 'in_progress', attempts: 1, cid: 'another-claim' });
  });
});
