// Transactional mode on MySQL/MariaDB: the claim, the endpoint's work on the same connection (the
// mysql2 connection of the claim's transaction) and the completion commit together. The shapes of
// store-transactional.test.ts, on a MariaDB server of this file's own.
import { randomUUID } from 'node:crypto';
import type { Pool, RowDataPacket } from 'mysql2/promise';
import { beforeAll, describe, expect, it } from 'vitest';
import { FingerprintMismatchError, KeyInUseError, problemFor, UNAVAILABLE_RETRY_AFTER_SECONDS, type IdempotentCall } from '@retrysafe/store';
import type { MysqlQueryable } from '@retrysafe/store/mysql';
import { createMysqlTestStore, hasMariaDb, useMariaDb } from '../helpers/mariadb';
import { jsonResult, principal, sleep, testPolicy } from '../helpers/store';

const ENDPOINT = 'POST /things';

describe.skipIf(!hasMariaDb)('store on MariaDB, transactional mode', () => {
  const mariadb = useMariaDb();
  let pool: Pool;

  beforeAll(async () => {
    pool = mariadb.server.pool(16);
    await pool.query('CREATE TABLE things (id CHAR(36) PRIMARY KEY, principal_id CHAR(36) NOT NULL, value TEXT) ENGINE = InnoDB');
  });

  const call = (overrides: Partial<IdempotentCall<MysqlQueryable>> & Pick<IdempotentCall<MysqlQueryable>, 'principalId' | 'key'>): IdempotentCall<MysqlQueryable> => ({
    endpoint: ENDPOINT,
    method: 'POST',
    body: { value: 'a' },
    policy: testPolicy,
    mode: 'transactional',
    work: async ({ db: tx }) => {
      const id = randomUUID();
      await tx.execute('INSERT INTO things (id, principal_id, value) VALUES (?, ?, ?)', [id, overrides.principalId, 'a']);
      return jsonResult(201, { id });
    },
    ...overrides,
  });

  const thingsOf = async (principalId: string) => {
    const [rows] = await pool.query<(RowDataPacket & { n: number })[]>('SELECT COUNT(*) AS n FROM things WHERE principal_id = ?', [principalId]);
    return Number(rows[0]?.n);
  };
  const keysOf = async (principalId: string) => {
    const [rows] = await pool.query<(RowDataPacket & { state: string; attempts: number })[]>(
      'SELECT state, attempts FROM retrysafe_idempotency_keys WHERE principal_id = ?',
      [principalId],
    );
    return rows.map((row) => ({ state: row.state, attempts: row.attempts }));
  };

  it('runs once, then replays the same bytes, status, content type and correlation id', async () => {
    const { store, events } = createMysqlTestStore(pool);
    const p = principal();
    const first = await store.execute(call({ principalId: p, key: 'k' }));
    const second = await store.execute(call({ principalId: p, key: 'k', body: { value: 'a' } }));
    expect(first.replayed).toBe(false);
    expect(second.replayed).toBe(true);
    expect(second.body.equals(first.body)).toBe(true);
    expect([second.status, second.contentType, second.correlationId]).toEqual([first.status, first.contentType, first.correlationId]);
    expect(await thingsOf(p)).toBe(1);
    expect(await keysOf(p)).toEqual([{ state: 'completed', attempts: 1 }]);
    expect(events.map((event) => event.outcome)).toEqual(['new', 'replay']);
  });

  it('gives the work the transaction’s own connection, in REPEATABLE READ, where the uncommitted key is visible', async () => {
    const { store } = createMysqlTestStore(pool);
    const p = principal();
    let seen: { isolation: string; inTransaction: number; ownKey: number } | undefined;
    await store.execute(
      call({
        principalId: p,
        key: 'k',
        work: async ({ db: tx }) => {
          const [rows] = await tx.query<(RowDataPacket & { isolation: string; in_tx: number })[]>(
            // MariaDB 10.11 names it tx_isolation (MySQL 8: transaction_isolation); in_transaction is the session's flag.
            'SELECT @@tx_isolation AS isolation, @@in_transaction AS in_tx',
          );
          const [own] = await tx.query<(RowDataPacket & { n: number })[]>('SELECT COUNT(*) AS n FROM retrysafe_idempotency_keys WHERE principal_id = ?', [p]);
          // Another connection does not see the claim until the transaction commits.
          const [outside] = await pool.query<(RowDataPacket & { n: number })[]>('SELECT COUNT(*) AS n FROM retrysafe_idempotency_keys WHERE principal_id = ?', [p]);
          expect(Number(outside[0]?.n)).toBe(0);
          seen = { isolation: String(rows[0]?.isolation), inTransaction: Number(rows[0]?.in_tx), ownKey: Number(own[0]?.n) };
          return jsonResult(201, {});
        },
      }),
    );
    expect(seen).toEqual({ isolation: 'REPEATABLE-READ', inTransaction: 1, ownKey: 1 });
  });

  it('takes one pool checkout for a new key (its read and its transaction share it) and one for a replay, and gives each back', async () => {
    const own = mariadb.server.pool(2);
    const counts = { checkouts: 0, releases: 0 };
    own.on('acquire', () => (counts.checkouts += 1));
    own.on('release', () => (counts.releases += 1));
    const { store } = createMysqlTestStore(own);
    const p = principal();
    expect((await store.execute(call({ principalId: p, key: 'k' }))).replayed).toBe(false);
    expect(counts).toEqual({ checkouts: 1, releases: 1 });
    expect((await store.execute(call({ principalId: p, key: 'k' }))).replayed).toBe(true);
    expect(counts).toEqual({ checkouts: 2, releases: 2 });
  });

  it('on a pool of one connection: a mismatch and a replay re-derived on the pool each find it given back by the read', async () => {
    const single = mariadb.server.pool(1);
    const { store } = createMysqlTestStore(single);
    const p = principal();
    const big = Buffer.alloc(testPolicy.maxResponseBytes + 1, 'x');
    const over = call({
      principalId: p,
      key: 'ref',
      work: () => Promise.resolve({ status: 201, contentType: 'text/plain', body: big, reference: 'ref-1' }),
      rederive: async (reference, db) => {
        const [rows] = await db.query<(RowDataPacket & { body: string })[]>('SELECT REPEAT(?, ?) AS body', ['x', big.length]);
        expect(reference).toBe('ref-1');
        return Buffer.from(String(rows[0]?.body));
      },
    });
    await store.execute(over);
    const replay = await store.execute(over);
    expect(replay.replayed).toBe(true);
    expect(replay.body.equals(big)).toBe(true);
    await expect(store.execute({ ...over, body: { value: 'b' } })).rejects.toBeInstanceOf(FingerprintMismatchError);
    expect((await store.execute(call({ principalId: p, key: 'after' }))).replayed).toBe(false);
  });

  it('refuses the same key with a different body (422)', async () => {
    const { store, events } = createMysqlTestStore(pool);
    const p = principal();
    await store.execute(call({ principalId: p, key: 'k' }));
    await expect(store.execute(call({ principalId: p, key: 'k', body: { value: 'b' } }))).rejects.toBeInstanceOf(FingerprintMismatchError);
    expect(events.at(-1)?.outcome).toBe('mismatch');
  });

  it('leaves nothing behind after a 5xx or a thrown error (a rollback leaves no key), so a retry runs again', async () => {
    const { store } = createMysqlTestStore(pool);
    const p = principal();
    const failing = call({
      principalId: p,
      key: 'k',
      work: async ({ db: tx }) => {
        await tx.execute('INSERT INTO things (id, principal_id) VALUES (?, ?)', [randomUUID(), p]);
        return jsonResult(503, { error: 'down' });
      },
    });
    expect((await store.execute(failing)).status).toBe(503);
    const throwing = call({
      principalId: p,
      key: 'k',
      work: async ({ db: tx }) => {
        await tx.execute('INSERT INTO things (id, principal_id) VALUES (?, ?)', [randomUUID(), p]);
        throw new Error('crash');
      },
    });
    await expect(store.execute(throwing)).rejects.toThrow('crash');
    // The abandoned transactions' rollbacks are not awaited by the answer: give them a moment.
    await sleep(100);
    expect(await thingsOf(p)).toBe(0);
    expect(await keysOf(p)).toEqual([]);
    const retry = await store.execute(call({ principalId: p, key: 'k' }));
    expect(retry.replayed).toBe(false);
    expect(await thingsOf(p)).toBe(1);
  });

  it('a completion that fails keeps nothing of the work, and a retry runs again', async () => {
    const { store } = createMysqlTestStore(pool);
    const p = principal();
    // A response status outside the table's CHECK (100-599 is enforced by MariaDB): the completion's UPDATE fails.
    const failingCompletion = call({
      principalId: p,
      key: 'k',
      work: async ({ db: tx }) => {
        await tx.execute('INSERT INTO things (id, principal_id) VALUES (?, ?)', [randomUUID(), p]);
        return jsonResult(99, { id: 'never stored' });
      },
    });
    await expect(store.execute(failingCompletion)).rejects.toMatchObject({ errno: 4025 });
    await sleep(100);
    expect(await thingsOf(p)).toBe(0);
    expect(await keysOf(p)).toEqual([]);
    const retry = await store.execute(call({ principalId: p, key: 'k' }));
    expect(retry.replayed).toBe(false);
    expect(await thingsOf(p)).toBe(1);
  });

  it('a transaction InnoDB rolls back to break a deadlock (1213) answers 503 with Retry-After, keeps nothing, and the retry runs', async () => {
    const { store } = createMysqlTestStore(pool);
    const p = principal();
    const table = `accounts_${p.slice(0, 8)}`;
    await pool.query(`CREATE TABLE ${table} (id INT PRIMARY KEY, n INT NOT NULL) ENGINE = InnoDB`);
    await pool.query(`INSERT INTO ${table} (id, n) VALUES ${Array.from({ length: 30 }, (_, index) => `(${index + 1}, 0)`).join(', ')}`);
    // Another transaction holds rows 2-30 (29 rows changed: InnoDB rolls back the smaller of the two).
    const other = await pool.getConnection();
    await other.query('START TRANSACTION');
    await other.query(`UPDATE ${table} SET n = n + 1 WHERE id >= 2`);
    let otherWaits: Promise<unknown> = Promise.resolve();
    const deadlocking = call({
      principalId: p,
      key: 'k',
      work: async ({ db: tx }) => {
        await tx.execute('INSERT INTO things (id, principal_id) VALUES (?, ?)', [randomUUID(), p]);
        await tx.execute(`UPDATE ${table} SET n = n + 1 WHERE id = 1`);
        // The other transaction now waits for row 1, held here; this one then waits for row 2: a deadlock.
        otherWaits = other.query(`UPDATE ${table} SET n = n + 1 WHERE id = 1`);
        await sleep(300);
        await tx.execute(`UPDATE ${table} SET n = n + 1 WHERE id = 2`);
        return jsonResult(201, { id: 'never committed' });
      },
    });
    const failure: unknown = await store.execute(deadlocking).then(
      () => null,
      (error: unknown) => error,
    );
    expect(failure).toMatchObject({ errno: 1213 });
    expect(problemFor(failure)).toMatchObject({ status: 503, headers: { 'Retry-After': String(UNAVAILABLE_RETRY_AFTER_SECONDS) } });
    await otherWaits;
    await other.query('COMMIT');
    other.release();
    await sleep(100);
    expect(await thingsOf(p)).toBe(0);
    expect(await keysOf(p)).toEqual([]);
    const retry = await store.execute(call({ principalId: p, key: 'k' }));
    expect(retry.replayed).toBe(false);
    expect(await thingsOf(p)).toBe(1);
    await pool.query(`DROP TABLE ${table}`);
  });

  it('makes a concurrent duplicate wait for the original and then replay it', async () => {
    const { store } = createMysqlTestStore(pool);
    const p = principal();
    let runs = 0;
    let started: () => void = () => undefined;
    const running = new Promise<void>((done) => (started = done));
    const slow = call({
      principalId: p,
      key: 'k',
      work: async ({ db: tx }) => {
        runs += 1;
        started();
        await tx.execute('INSERT INTO things (id, principal_id) VALUES (?, ?)', [randomUUID(), p]);
        await sleep(300);
        return jsonResult(201, { run: runs });
      },
    });
    const original = store.execute(slow);
    await running;
    const duplicates = await Promise.all([store.execute(slow), store.execute(slow), store.execute(slow)]);
    const first = await original;
    expect(runs).toBe(1);
    for (const duplicate of duplicates) {
      expect(duplicate.replayed).toBe(true);
      expect(duplicate.body.equals(first.body)).toBe(true);
    }
    expect(await thingsOf(p)).toBe(1);
  });

  it('answers 409 (KeyInUse, Retry-After) when the original holds the key past the lock wait timeout (1205)', async () => {
    const { store, events } = createMysqlTestStore(pool);
    const p = principal();
    // innodb_lock_wait_timeout counts whole seconds: 100 ms waits 1 s.
    const policy = { ...testPolicy, lockTimeoutMs: 100 };
    let started: () => void = () => undefined;
    const running = new Promise<void>((done) => (started = done));
    const slow = call({
      principalId: p,
      key: 'k',
      policy,
      work: async () => {
        started();
        await sleep(3_000);
        return jsonResult(201, {});
      },
    });
    const original = store.execute(slow);
    await running;
    const waited = performance.now();
    const duplicate = await store.execute(slow).catch((error: unknown) => error);
    expect(duplicate).toBeInstanceOf(KeyInUseError);
    expect((duplicate as KeyInUseError).retryAfterSeconds).toBeGreaterThanOrEqual(1);
    expect(performance.now() - waited).toBeGreaterThanOrEqual(900);
    expect(events.some((event) => event.outcome === 'conflict')).toBe(true);
    expect((await original).replayed).toBe(false);
  });

  it('gives an expired key that is not yet swept a new life', async () => {
    const { store, events } = createMysqlTestStore(pool);
    const p = principal();
    await store.execute(call({ principalId: p, key: 'k' }));
    await pool.query(
      'UPDATE retrysafe_idempotency_keys SET created_at = UTC_TIMESTAMP(6) - INTERVAL 3 HOUR, expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE principal_id = ?',
      [p],
    );
    // Even a different body: past its window the key promises nothing.
    const again = await store.execute(call({ principalId: p, key: 'k', body: { value: 'other' } }));
    expect(again.replayed).toBe(false);
    expect(events.at(-1)?.outcome).toBe('takeover');
    const [rows] = await pool.query<(RowDataPacket & { attempts: number; fresh: number })[]>(
      'SELECT attempts, expires_at > UTC_TIMESTAMP(6) + INTERVAL 1 HOUR AS fresh FROM retrysafe_idempotency_keys WHERE principal_id = ?',
      [p],
    );
    expect(rows.map((row) => [row.attempts, row.fresh])).toEqual([[2, 1]]);
    expect(await thingsOf(p)).toBe(2);
  });

  it('lets one of many concurrent retries of an expired key run; the others wait and replay, or get a 409 (a lock wait or a deadlock lost, 1205/1213)', async () => {
    const { store } = createMysqlTestStore(pool);
    const p = principal();
    await store.execute(call({ principalId: p, key: 'k' }));
    await pool.query(
      'UPDATE retrysafe_idempotency_keys SET created_at = UTC_TIMESTAMP(6) - INTERVAL 3 HOUR, expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE principal_id = ?',
      [p],
    );
    let runs = 0;
    const retry = call({
      principalId: p,
      key: 'k',
      work: async ({ db: tx }) => {
        runs += 1;
        await tx.execute('INSERT INTO things (id, principal_id) VALUES (?, ?)', [randomUUID(), p]);
        await sleep(200);
        return jsonResult(201, { run: runs });
      },
    });
    // Every one of them meets the committed, expired row: 1062, its shared lock, then the takeover's FOR UPDATE.
    const results = await Promise.allSettled(Array.from({ length: 16 }, () => store.execute(retry)));
    expect(runs).toBe(1);
    expect(await thingsOf(p)).toBe(2);
    const answers = results.filter((result) => result.status === 'fulfilled').map((result) => result.value);
    expect(answers.filter((answer) => !answer.replayed)).toHaveLength(1);
    for (const result of results) if (result.status === 'rejected') expect(result.reason).toBeInstanceOf(KeyInUseError);
    expect(await keysOf(p)).toEqual([{ state: 'completed', attempts: 2 }]);
  });

  it('never makes a claim of another key wait (REPEATABLE READ: an insert locks its record and its gap for inserts of the same key only)', async () => {
    const { store } = createMysqlTestStore(pool);
    const p = principal();
    let started: () => void = () => undefined;
    const running = new Promise<void>((done) => (started = done));
    let release: () => void = () => undefined;
    const held = new Promise<void>((done) => (release = done));
    // The original holds its transaction (and its key's locks) until released.
    const original = store.execute(
      call({
        principalId: p,
        key: 'key-b',
        policy: { ...testPolicy, lockTimeoutMs: 1_000 },
        work: async ({ db: tx }) => {
          await tx.execute('INSERT INTO things (id, principal_id) VALUES (?, ?)', [randomUUID(), p]);
          started();
          await held;
          return jsonResult(201, {});
        },
      }),
    );
    await running;
    // Keys on either side of it in the primary key's order, and one far away: none waits out the 1 s lock wait (a 409).
    const neighbours = await Promise.allSettled(['key-a', 'key-c', 'zzz'].map((key) => store.execute(call({ principalId: p, key, policy: { ...testPolicy, lockTimeoutMs: 1_000 } }))));
    expect(neighbours.map((result) => result.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled']);
    release();
    expect((await original).replayed).toBe(false);
    expect(await thingsOf(p)).toBe(4);
  });
});
