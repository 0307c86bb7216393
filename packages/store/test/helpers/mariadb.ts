// MariaDB for a test file: a server of its own (mariadb-server.ts) started before its tests and
// stopped after, and a store whose keys live there. Where no server binary is found, `hasMariaDb`
// is false and the tests that need it are skipped, and say so.
import { randomBytes } from 'node:crypto';
import type { Pool } from 'mysql2/promise';
import { afterAll, beforeAll } from 'vitest';
import { IdempotencyStore, ResponseKeyRing, type FlowEvent, type LiveKeyQuota, type ResponseKey } from '@retrysafe/store';
import { MysqlBackend, type MysqlQueryable } from '@retrysafe/store/mysql';
import { hasMariaDb, startMariaDb, type MariaDb } from './mariadb-server';
import { newResponseKey, TEST_SERVICE } from './store';

export { hasMariaDb, startMariaDb, type MariaDb };

if (!hasMariaDb) {
  process.stdout.write('MariaDB tests SKIPPED: no mariadbd and mariadb-install-db found (apt-get install mariadb-server, or set MARIADBD_PATH)\n');
}

/** A migrated MariaDB server for a test file's tests: started before them, stopped after. */
export function useMariaDb(): { readonly server: MariaDb } {
  let server: MariaDb | undefined;
  beforeAll(async () => {
    server = await startMariaDb({ migrated: true });
  }, 120_000);
  afterAll(async () => {
    await server?.stop();
  }, 60_000);
  return {
    get server(): MariaDb {
      if (!server) throw new Error('the MariaDB server is not started yet (use it inside tests)');
      return server;
    },
  };
}

/** A store whose keys live in MariaDB (MysqlBackend on `pool`), recording its flow events, as createTestStore does for Postgres. */
export function createMysqlTestStore(
  pool: Pool,
  options: { service?: string; keys?: ResponseKey[]; secret?: Buffer; quota?: LiveKeyQuota; onLeaseLost?: (id: { key: string }) => void } = {},
): { store: IdempotencyStore<MysqlQueryable>; events: FlowEvent[]; keyRing: ResponseKeyRing; secret: Buffer } {
  const events: FlowEvent[] = [];
  const keyRing = new ResponseKeyRing(options.keys ?? [newResponseKey()]);
  const secret = options.secret ?? randomBytes(32);
  const store = new IdempotencyStore<MysqlQueryable>({
    backend: new MysqlBackend(pool),
    service: options.service ?? TEST_SERVICE,
    fingerprintSecret: secret,
    keyRing,
    quota: options.quota,
    onLeaseLost: options.onLeaseLost,
    observer: { record: (event) => events.push(event) },
  });
  return { store, events, keyRing, secret };
}
