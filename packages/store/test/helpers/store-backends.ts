// The key-record backends one contract runs on: Postgres (the test file's database), Redis (a
// redis-server of the file's own), MySQL (a MariaDB server of the file's own, migrated) and a Redis
// Cluster (three masters with a replica each). `useKeyBackend(kind, db)` registers the hooks that
// start what the backend needs and gives the test a backend and a view of a key's stored state.
import type { Pool, RowDataPacket } from 'mysql2/promise';
import { afterAll, beforeAll } from 'vitest';
import type { IdempotencyBackend } from '@retrysafe/store';
import { MysqlBackend } from '@retrysafe/store/mysql';
import { connectRedisCluster, RedisBackend, recordKey } from '@retrysafe/store/redis';
import type { TestDatabase } from './database';
import { hasMariaDb, startMariaDb, type MariaDb } from './mariadb';
import { hasRedis, startRedis, type TestRedis } from './redis';
import { startRedisCluster } from './redis-cluster';
import { TEST_SERVICE } from './store';

export type KeyBackendKind = 'postgres' | 'redis' | 'mysql' | 'redis-cluster';

/** The backends to run on here: Redis and MySQL only where their servers are installed (helpers/redis and helpers/mariadb say so when not). */
export const keyBackendKinds: KeyBackendKind[] = ['postgres', ...(hasRedis ? (['redis'] as const) : []), ...(hasMariaDb ? (['mysql'] as const) : [])];

/** keyBackendKinds and a Redis Cluster (six servers: for the contract itself, not for every file that runs on both backends). */
export const keyBackendKindsWithCluster: KeyBackendKind[] = hasRedis ? [...keyBackendKinds, 'redis-cluster'] : keyBackendKinds;

/**
 * A Redis Cluster seen as a TestRedis: `url` is `cluster:<node url>,<node url>...` (what
 * test/fixtures/claim-and-hang.ts (CLAIM_AND_HANG) takes), `command` goes to the key's master.
 */
async function startClusterAsTestRedis(): Promise<TestRedis> {
  const cluster = await startRedisCluster();
  try {
    const connection = await connectRedisCluster(cluster.rootNodes);
    return {
      url: `cluster:${cluster.rootNodes.map((node) => node.url).join(',')}`,
      port: cluster.nodes[0]?.port ?? 0,
      connection,
      command: (...command) => connection.commands.sendCommand(command),
      restart: () => Promise.reject(new Error('restart() is for one server; kill a node of the cluster instead')),
      async stop() {
        await connection.close().catch(() => undefined);
        await cluster.stop();
      },
    };
  } catch (error) {
    await cluster.stop();
    throw error;
  }
}

export interface KeyBackend {
  kind: KeyBackendKind;
  /**
   * The backend a store is given (undefined for Postgres: the store's own on the pool). Typed for
   * pg's context.db: the contract's work never touches context.db, which is mysql2's on MySQL.
   */
  backend(): IdempotencyBackend | undefined;
  /** The stored state and attempt number of one key, [] when absent. */
  stateOf(principalId: string, key: string, scope: string, service?: string): Promise<{ state: string; attempts: number }[]>;
  /** The stored (sealed) response body of one key, if any. */
  storedBody(principalId: string, key: string, scope: string): Promise<Buffer | undefined>;
  /** The backend's URL for another process (the SIGKILL fixture); none for Postgres (the database's). */
  url(): string | undefined;
  /** With Redis: the server (its URL, a command line to it). */
  redis?: TestRedis;
  /** With MySQL: the server, and a pool on it. */
  mysql?: { server: MariaDb; pool: Pool };
}

export function useKeyBackend(kind: KeyBackendKind, db: TestDatabase): KeyBackend {
  const handle: KeyBackend = {
    kind,
    backend: () => {
      if (handle.redis) return new RedisBackend(handle.redis.connection.commands, { db: db.pool });
      if (handle.mysql) return new MysqlBackend(handle.mysql.pool) as unknown as IdempotencyBackend;
      return undefined;
    },
    async stateOf(principalId, key, scope, service = TEST_SERVICE) {
      if (handle.redis) {
        const [state, attempts] = (await handle.redis.command('HMGET', recordKey({ principalId, service, scope, key }), 'state', 'att')) as (Buffer | null)[];
        return state ? [{ state: state.toString(), attempts: Number(attempts?.toString()) }] : [];
      }
      if (handle.mysql) {
        const [rows] = await handle.mysql.pool.query<(RowDataPacket & { state: string; attempts: number })[]>(
          'SELECT state, attempts FROM retrysafe_idempotency_keys WHERE principal_id = ? AND service = ? AND scope = ? AND idempotency_key = ?',
          [principalId, service, scope, key],
        );
        return rows.map((row) => ({ state: row.state, attempts: row.attempts }));
      }
      const { rows } = await db.pool.query<{ state: string; attempts: number }>(
        'SELECT state, attempts FROM idempotency_keys WHERE principal_id = $1 AND service = $2 AND scope = $3 AND key = $4',
        [principalId, service, scope, key],
      );
      return rows;
    },
    async storedBody(principalId, key, scope) {
      if (handle.redis) return (await handle.redis.command('HGET', recordKey({ principalId, service: TEST_SERVICE, scope, key }), 'body')) as Buffer | undefined;
      if (handle.mysql) {
        const [rows] = await handle.mysql.pool.query<(RowDataPacket & { body: Buffer | null })[]>(
          'SELECT response_body AS body FROM retrysafe_idempotency_keys WHERE principal_id = ? AND service = ? AND scope = ? AND idempotency_key = ?',
          [principalId, TEST_SERVICE, scope, key],
        );
        return rows[0]?.body ?? undefined;
      }
      const { rows } = await db.pool.query<{ response_body: Buffer | null }>(
        'SELECT response_body FROM idempotency_keys WHERE principal_id = $1 AND service = $2 AND scope = $3 AND key = $4',
        [principalId, TEST_SERVICE, scope, key],
      );
      return rows[0]?.response_body ?? undefined;
    },
    url: () => handle.redis?.url ?? handle.mysql?.server.uri,
  };
  if (kind === 'redis' || kind === 'redis-cluster') {
    beforeAll(async () => {
      handle.redis = kind === 'redis' ? await startRedis() : await startClusterAsTestRedis();
    });
    afterAll(async () => {
      await handle.redis?.stop();
    });
  }
  if (kind === 'mysql') {
    beforeAll(async () => {
      const server = await startMariaDb({ migrated: true });
      handle.mysql = { server, pool: server.pool(24) };
    }, 120_000);
    afterAll(async () => {
      await handle.mysql?.server.stop();
    }, 60_000);
  }
  return handle;
}
