// The store tables' version this package's statements are written for. The database says its
// own through retrysafe.retrysafe_store_schema_version() (migration 0015 and every later migration that
// changes what the request path touches); a service refuses to start on a mismatch, so it
// never runs statements against tables that are not what they expect.
import type { Queryable } from './statements.js';

/** 11: service instance starts recorded at start, and the release of a stale claim no longer audited (migration 0029); 10: the Redis reconciler's findings and runs (migration 0027); 9: unrecorded completions written at flush (migration 0026); 8: the trace of attempts written at flush (migration 0025); 7: routes' own policies registered (migration 0024); 6: the principals' hours and days written at flush (migration 0023); 5: the overview's series (0021); 4: the principals behind outcomes (0020); 3: the store's own schema, retrysafe (0017); 2: services (0016). */
export const STORE_SCHEMA_VERSION = 11;

const HOW_TO_MIGRATE =
  "migrate the database with `npx retrysafe migrate` (DATABASE_URL set; from this package) or the Retrysafe server's `npm run cli -- migrate` (or `npm start`)";

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
    `SELECT to_regclass('retrysafe.idempotency_keys') IS NOT NULL AS keys,
            to_regprocedure('retrysafe.retrysafe_store_schema_version()') IS NOT NULL AS versioned`,
  );
  const found = rows[0];
  if (!found?.keys) {
    // Before version 3 the store's tables were in public: that install is older, not absent.
    const legacy = (await db.query<{ found: boolean }>("SELECT to_regclass('public.idempotency_keys') IS NOT NULL AND to_regprocedure('public.retrysafe_store_schema_version()') IS NOT NULL AS found")).rows[0]?.found;
    if (legacy) {
      const version = (await db.query<{ version: number }>('SELECT public.retrysafe_store_schema_version() AS version')).rows[0]?.version ?? 0;
      throw new StoreSchemaMismatchError(version, STORE_SCHEMA_VERSION, `The database's Retrysafe store schema is version ${version} (in schema public), older than this @retrysafe/store's ${STORE_SCHEMA_VERSION}: ${HOW_TO_MIGRATE}`);
    }
    throw new StoreSchemaMismatchError(null, STORE_SCHEMA_VERSION, `The database has no Retrysafe store tables: ${HOW_TO_MIGRATE}`);
  }
  if (!found.versioned) {
    throw new StoreSchemaMismatchError(0, STORE_SCHEMA_VERSION, `The database's Retrysafe store schema is older than this @retrysafe/store (version ${STORE_SCHEMA_VERSION}): ${HOW_TO_MIGRATE}`);
  }
  const version = (await db.query<{ version: number }>('SELECT retrysafe.retrysafe_store_schema_version() AS version')).rows[0]?.version ?? 0;
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
