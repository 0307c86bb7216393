// The key-record backends one contract runs on: Postgres (the test file's database), Redis (a
// redis-server of the file's own) and a Redis Cluster (three masters with a replica each). `useKeyBackend(kind, db)` registers the hooks that start what
// the backend needs and gives the test a backend and a view of a key's stored state.
import { afterAll, beforeAll } from 'vitest';
import type { IdempotencyBackend } from '@retrysafe/store';
import { connectRedisCluster, RedisBackend, recordKey } from '@retrysafe/store/redis';
import type { TestDatabase } from './database';
import { hasRedis, startRedis, type TestRedis } from './redis';
import { startRedisCluster } from './redis-cluster';
import { TEST_SERVICE } from './store';

export type KeyBackendKind = 'postgres' | 'redis' | 'redis-cluster';

/** The backends to run on here: Redis only where a redis-server is installed (helpers/redis says so when not). */
export const keyBackendKinds: KeyBackendKind[] = hasRedis ? ['postgres', 'redis'] : ['postgres'];

/** keyBackendKinds and a Redis Cluster (six servers: for the contract itself, not for every file that runs on both backends). */
export const keyBackendKindsWithCluster: KeyBackendKind[] = hasRedis ? [...keyBackendKinds, 'redis-cluster'] : keyBackendKinds;

/**
 * A Redis Cluster seen as a TestRedis: `url` is `cluster:<node url>,<node url>...` (what
 * test/fixtures/claim-and-hang.ts takes), `command` goes to the key's master.
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
  /** The backend a store is given (undefined for Postgres: the store's own on the pool). */
  backend(): IdempotencyBackend | undefined;
  /** The stored state and attempt number of one key, [] when absent. */
  stateOf(principalId: string, key: string, scope: string, service?: string): Promise<{ state: string; attempts: number }[]>;
  /** With Redis: the server (its URL, a command line to it). */
  redis?: TestRedis;
}

export function useKeyBackend(kind: KeyBackendKind, db: TestDatabase): KeyBackend {
  const handle: KeyBackend = {
    kind,
    backend: () => (handle.redis ? new RedisBackend(handle.redis.connection.commands, { db: db.pool }) : undefined),
    async stateOf(principalId, key, scope, service = TEST_SERVICE) {
      if (handle.redis) {
        const [state, attempts] = (await handle.redis.command('HMGET', recordKey({ principalId, service, scope, key }), 'state', 'att')) as (Buffer | null)[];
        return state ? [{ state: state.toString(), attempts: Number(attempts?.toString()) }] : [];
      }
      const { rows } = await db.pool.query<{ state: string; attempts: number }>(
        'SELECT state, attempts FROM idempotency_keys WHERE principal_id = $1 AND service = $2 AND scope = $3 AND key = $4',
        [principalId, service, scope, key],
      );
      return rows;
    },
  };
  if (kind === 'redis' || kind === 'redis-cluster') {
    beforeAll(async () => {
      handle.redis = kind === 'redis' ? await startRedis() : await startClusterAsTestRedis();
    });
    afterAll(async () => {
      await handle.redis?.stop();
    });
  }
  return handle;
}
