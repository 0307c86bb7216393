// One contract, run on each key backend: N requests with the same key arrive at once, on N real
// connections, and the work's effect happens exactly once (0 double effects), in both execution
// modes, at 32 and 64 callers. Every other caller gets the original's bytes replayed, or a 409
// (a takeover race lost, or a lock wait that ran out under load), never a second run.
import { randomUUID } from 'node:crypto';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IdempotencyStore, KeyInUseError, type ExecutionMode, type IdempotentCall, type StoreOutcome } from '@retrysafe/store';
import { STORE_POOL_SETTINGS } from '@retrysafe/store/postgres';
import type { MysqlQueryable } from '@retrysafe/store/mysql';
import { useTestDatabase } from '../helpers/database';
import { createMysqlTestStore, hasMariaDb, useMariaDb } from '../helpers/mariadb';
import { createTestStore, jsonResult, principal, sleep, testPolicy } from '../helpers/store';

const WIDTHS = [32, 64];
const ROUNDS = 3;
const MODES: ExecutionMode[] = ['transactional', 'claim-first'];

interface RaceBackend<Db> {
  store: IdempotencyStore<Db>;
  /** The work's effect, on the db the store gives it (in transactional mode, the claim's transaction). */
  effect(db: Db, principalId: string, key: string): Promise<void>;
  /** How many effects of (principal, key) were committed. */
  effects(principalId: string, key: string): Promise<number>;
}

function raceContract<Db>(name: string, open: () => RaceBackend<Db>): void {
  describe.each(MODES)(`one key, many callers at once: ${name}, %s mode`, (mode) => {
    it.each(WIDTHS)('%i callers: exactly one run and one effect, every other answer a replay of it or a 409', async (width) => {
      const backend = open();
      for (let round = 0; round < ROUNDS; round += 1) {
        const p = principal();
        const key = `race-${round}`;
        let runs = 0;
        const call: IdempotentCall<Db> = {
          principalId: p,
          key,
          endpoint: 'POST /race',
          method: 'POST',
          body: { round },
          policy: { ...testPolicy, lockTimeoutMs: 5_000 },
          mode,
          work: async ({ db }) => {
            runs += 1;
            await backend.effect(db, p, key);
            // Long enough that the others arrive while it runs, however slowly they are served.
            await sleep(150);
            return jsonResult(201, { id: randomUUID() });
          },
        };
        const results = await Promise.allSettled(Array.from({ length: width }, () => backend.store.execute(call)));
        expect(runs).toBe(1);
        expect(await backend.effects(p, key)).toBe(1);
        const answers = results.filter((result): result is PromiseFulfilledResult<StoreOutcome> => result.status === 'fulfilled').map((result) => result.value);
        const originals = answers.filter((answer) => !answer.replayed);
        expect(originals).toHaveLength(1);
        const original = originals[0];
        if (!original) return;
        for (const answer of answers) {
          expect(answer.body.equals(original.body)).toBe(true);
          expect(answer.correlationId).toBe(original.correlationId);
        }
        for (const result of results) if (result.status === 'rejected') expect(result.reason).toBeInstanceOf(KeyInUseError);
        // Transactional duplicates wait for the original and replay it (a 409 only when a wait ran out).
        if (mode === 'transactional') expect(answers.length).toBeGreaterThan(width / 2);
      }
    });
  });
}

describe('on Postgres', () => {
  const db = useTestDatabase();
  let pool: pg.Pool;
  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: db.url, max: Math.max(...WIDTHS) + 4, ...STORE_POOL_SETTINGS });
    await pool.query('CREATE TABLE race_effects (principal_id uuid NOT NULL, key text NOT NULL)');
  });
  afterAll(async () => {
    await pool.end();
  });
  raceContract('Postgres', () => ({
    store: createTestStore(pool).store,
    effect: async (work, principalId, key) => {
      await work.query('INSERT INTO race_effects (principal_id, key) VALUES ($1, $2)', [principalId, key]);
    },
    effects: async (principalId, key) =>
      (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM race_effects WHERE principal_id = $1 AND key = $2', [principalId, key])).rows[0]?.n ?? 0,
  }));
});

describe.skipIf(!hasMariaDb)('on MariaDB', () => {
  const mariadb = useMariaDb();
  let pool: mysql.Pool;
  beforeAll(async () => {
    pool = mariadb.server.pool(Math.max(...WIDTHS) + 4);
    await pool.query('CREATE TABLE race_effects (principal_id CHAR(36) NOT NULL, idempotency_key VARCHAR(255) NOT NULL) ENGINE = InnoDB');
  });
  raceContract<MysqlQueryable>('MariaDB', () => ({
    store: createMysqlTestStore(pool).store,
    effect: async (work, principalId, key) => {
      await work.execute('INSERT INTO race_effects (principal_id, idempotency_key) VALUES (?, ?)', [principalId, key]);
    },
    effects: async (principalId, key) => {
      const [rows] = await pool.query<(mysql.RowDataPacket & { n: number })[]>('SELECT COUNT(*) AS n FROM race_effects WHERE principal_id = ? AND idempotency_key = ?', [principalId, key]);
      return rows[0]?.n ?? 0;
    },
  }));
});
