// Transactional mode: claim, effect and completion in one transaction.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { FingerprintMismatchError, KeyInUseError } from '@retrysafe/store';
import type { IdempotentCall } from '@retrysafe/store';
import { runnable, storeConnections, useTestDatabase } from '../helpers/database';
import { createTestStore, jsonResult, principal, sleep, testPolicy } from '../helpers/store';

const ENDPOINT = 'POST /things';

// Each case direct and through a transaction-mode PgBouncer (createRetrysafe's pooler: 'transaction', and 'transaction-prepared' where a PgBouncer 1.21 or later is found), in both layouts.
describe.each(storeConnections.filter(runnable))('store, transactional mode ($name)', ({ layout, pooler }) => {
  const db = useTestDatabase(layout, { pooler });

  async function setup() {
    await db.pool.query('CREATE TABLE IF NOT EXISTS things (id uuid PRIMARY KEY, principal_id uuid NOT NULL, value text)');
    // On the store's pool, as the app runs it: BEGIN and the claim pipelined, ROLLBACK not awaited.
    return createTestStore(db.storePool, { layout, pooler });
  }

  const call = (overrides: Partial<IdempotentCall> & Pick<IdempotentCall, 'principalId' | 'key'>): IdempotentCall => ({
    endpoint: ENDPOINT,
    method: 'POST',
    body: { value: 'a' },
    policy: testPolicy,
    mode: 'transactional',
    work: async ({ db: tx }) => {
      const id = randomUUID();
      await tx.query('INSERT INTO things (id, principal_id, value) VALUES ($1, $2, $3)', [id, overrides.principalId, 'a']);
      return jsonResult(201, { id });
    },
    ...overrides,
  });

  const thingsOf = async (principalId: string) =>
    Number((await db.pool.query<{ n: string }>('SELECT count(*) AS n FROM things WHERE principal_id = $1', [principalId])).rows[0]?.n);

  it('runs once, then replays the same bytes, status, content type and correlation id', async () => {
    const { store, events } = await setup();
    const p = principal();
    const first = await store.execute(call({ principalId: p, key: 'k' }));
    const second = await store.execute(call({ principalId: p, key: 'k', body: { value: 'a' } }));
    expect(first.replayed).toBe(false);
    expect(second.replayed).toBe(true);
    expect(second.body.equals(first.body)).toBe(true);
    expect([second.status, second.contentType, second.correlationId]).toEqual([first.status, first.contentType, first.correlationId]);
    expect(await thingsOf(p)).toBe(1);
    expect(events.map((event) => event.outcome)).toEqual(['new', 'replay']);
    expect(events.every((event) => typeof event.claimLatencyMs === 'number')).toBe(true);
  });

  it('refuses the same key with a different body', async () => {
    const { store, events } = await setup();
    const p = principal();
    await store.execute(call({ principalId: p, key: 'k' }));
    await expect(store.execute(call({ principalId: p, key: 'k', body: { value: 'b' } }))).rejects.toBeInstanceOf(FingerprintMismatchError);
    expect(events.at(-1)?.outcome).toBe('mismatch');
  });

  it('leaves nothing behind after a 5xx or a thrown error, so a retry runs again', async () => {
    const { store } = await setup();
    const p = principal();
    const failing = call({
      principalId: p,
      key: 'k',
      work: async ({ db: tx }) => {
        await tx.query('INSERT INTO things (id, principal_id) VALUES ($1, $2)', [randomUUID(), p]);
        return jsonResult(503, { error: 'down' });
      },
    });
    expect((await store.execute(failing)).status).toBe(503);
    const throwing = call({
      principalId: p,
      key: 'k',
      work: async ({ db: tx }) => {
        await tx.query('INSERT INTO things (id, principal_id) VALUES ($1, $2)', [randomUUID(), p]);
        throw new Error('crash');
      },
    });
    await expect(store.execute(throwing)).rejects.toThrow('crash');
    expect(await thingsOf(p)).toBe(0);
    const { rowCount } = await db.pool.query('SELECT 1 FROM idempotency_keys WHERE principal_id = $1', [p]);
    expect(rowCount).toBe(0);
    const retry = await store.execute(call({ principalId: p, key: 'k' }));
    expect(retry.replayed).toBe(false);
    expect(await thingsOf(p)).toBe(1);
  });

  it('a completion that fails keeps nothing of the work (its COMMIT leaves with it and rolls back), and a retry runs again', async () => {
    const { store } = await setup();
    const p = principal();
    // The work swallows an error of its own: the transaction is aborted, so the completion fails (25P02).
    const aborting = call({
      principalId: p,
      key: 'k',
      work: async ({ db: tx }) => {
        await tx.query('INSERT INTO things (id, principal_id) VALUES ($1, $2)', [randomUUID(), p]);
        await tx.query('SELECT 1 / 0').catch(() => undefined);
        return jsonResult(201, { id: 'never stored' });
      },
    });
    await expect(store.execute(aborting)).rejects.toMatchObject({ code: '25P02' });
    expect(await thingsOf(p)).toBe(0);
    const { rowCount } = await db.pool.query('SELECT 1 FROM idempotency_keys WHERE principal_id = $1', [p]);
    expect(rowCount).toBe(0);
    const retry = await store.execute(call({ principalId: p, key: 'k' }));
    expect(retry.replayed).toBe(false);
    expect(await thingsOf(p)).toBe(1);
    // Every connection of the store's pool went back clean (no transaction left open on it).
    const open = await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'");
    expect(open.rows[0]?.n).toBe(0);
  });

  it('makes a concurrent duplicate wait for the original and then replay it', async () => {
    const { store } = await setup();
    const p = principal();
    let runs = 0;
    let working: () => void = () => undefined;
    const claimed = new Promise<void>((done) => (working = done));
    const slow = call({
      principalId: p,
      key: 'k',
      work: async ({ db: tx }) => {
        runs += 1;
        working();
        await tx.query('INSERT INTO things (id, principal_id) VALUES ($1, $2)', [randomUUID(), p]);
        await sleep(300);
        return jsonResult(201, { run: runs });
      },
    });
    const original = store.execute(slow);
    // The duplicates start once the original holds its claim (its work runs), not after a guess.
    await claimed;
    const duplicates = await Promise.all([store.execute(slow), store.execute(slow), store.execute(slow)]);
    const first = await original;
    expect(runs).toBe(1);
    for (const duplicate of duplicates) {
      expect(duplicate.replayed).toBe(true);
      expect(duplicate.body.equals(first.body)).toBe(true);
    }
    expect(await thingsOf(p)).toBe(1);
  });

  it('answers 409 (KeyInUse) when the original holds the key past lock_timeout', async () => {
    const { store, events } = await setup();
    const p = principal();
    const policy = { ...testPolicy, lockTimeoutMs: 100 };
    let working: () => void = () => undefined;
    const claimed = new Promise<void>((done) => (working = done));
    const slow = call({
      principalId: p,
      key: 'k',
      policy,
      work: async () => {
        working();
        await held;
        return jsonResult(201, {});
      },
    });
    let release: () => void = () => undefined;
    const held = new Promise<void>((done) => (release = done));
    const original = store.execute(slow);
    await claimed;
    // The original holds its row until the duplicate has answered, however slow the machine.
    const duplicate = await store.execute(slow).catch((error: unknown) => error);
    release();
    expect(duplicate).toBeInstanceOf(KeyInUseError);
    expect((duplicate as KeyInUseError).retryAfterSeconds).toBeGreaterThanOrEqual(1);
    expect(events.some((event) => event.outcome === 'conflict')).toBe(true);
    expect((await original).replayed).toBe(false);
  });

  it('gives an expired key that is not yet swept a new life', async () => {
    const { store, events } = await setup();
    const p = principal();
    await store.execute(call({ principalId: p, key: 'k' }));
    await db.pool.query(
      "UPDATE idempotency_keys SET created_at = now() - interval '3 hours', expires_at = now() - interval '1 second' WHERE principal_id = $1",
      [p],
    );
    // Even a different body: past its window the key promises nothing.
    const again = await store.execute(call({ principalId: p, key: 'k', body: { value: 'other' } }));
    expect(again.replayed).toBe(false);
    expect(events.at(-1)?.outcome).toBe(layout === 'plain' ? 'takeover' : 'new');
    const { rows } = await db.pool.query<{ attempts: number; fresh: boolean }>(
      "SELECT attempts, expires_at > now() + interval '1 hour' AS fresh FROM idempotency_keys WHERE principal_id = $1 ORDER BY expires_at",
      [p],
    );
    // Plain layout: the expired row is taken over in place (attempt 2). Partitioned: the
    // expired row waits for its partition to be dropped, and the key lives again in a new row.
    expect(rows).toEqual(layout === 'plain' ? [{ attempts: 2, fresh: true }] : [{ attempts: 1, fresh: false }, { attempts: 1, fresh: true }]);
    expect(await thingsOf(p)).toBe(2);
  });
});
