// The store tables' version this package's statements are written for. The database says its
// own through retrysafe_store_schema_version() (migration 0015 and every later migration that
// changes what the request path touches); a service refuses to start on a mismatch, so it
// never runs statements against tables that are not what they expect.
import type { Queryable } from './statements.js';

export const STORE_SCHEMA_VERSION = 3;

const HOW_TO_MIGRATE = "migrate the database with the Retrysafe server's `npm run cli -- migrate` (or `npm start`)";

export class StoreSchemaMismatchError extends Error {
  readonly code = 'STORE_SCHEMA_MISMATCH';
  constructor(
    readonly found: number | null,
    readonly expected: number,
    message: string,
  ) {
    super(message);
    this.name = 'StoreSchemaMismatchError';
  }
}

/** Refuses a database whose store schema is missing, older or newer than this package's. */
export async function checkStoreSchema(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ keys: boolean; versioned: boolean }>(
    `SELECT to_regclass('idempotency_keys') IS NOT NULL AS keys,
            to_regprocedure('retrysafe_store_schema_version()') IS NOT NULL AS versioned`,
  );
  const found = rows[0];
  if (!found?.keys) {
    throw new StoreSchemaMismatchError(null, STORE_SCHEMA_VERSION, `The database has no Retrysafe store tables: ${HOW_TO_MIGRATE}`);
  }
  if (!found.versioned) {
    throw new StoreSchemaMismatchError(0, STORE_SCHEMA_VERSION, `The database's Retrysafe store schema is older than this @retrysafe/store (version ${STORE_SCHEMA_VERSION}): ${HOW_TO_MIGRATE}`);
  }
  const version = (await db.query<{ version: number }>('SELECT retrysafe_store_schema_version() AS version')).rows[0]?.version ?? 0;
  if (version < STORE_SCHEMA_VERSION) {
    throw new StoreSchemaMismatchError(version, STORE_SCHEMA_VERSION, `The database's Retrysafe store schema is version ${version}, older than this @retrysafe/store's ${STORE_SCHEMA_VERSION}: ${HOW_TO_MIGRATE}`);
  }
  if (version > STORE_SCHEMA_VERSION) {
    throw new StoreSchemaMismatchError(
      version,
      STORE_SCHEMA_VERSION,
      `The database's Retrysafe store schema is version ${version}, newer than this @retrysafe/store understands (${STORE_SCHEMA_VERSION}): upgrade @retrysafe/store to the Retrysafe server's version`,
    );
  }
  return version;
}
