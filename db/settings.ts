// The database's settings in the environment, on the floor that uses them: db/ reads them here,
// and server/config.ts builds its one view of the environment from the same fields and the same
// reader (so db/ never imports server/). Empty variables count as unset.
import { z } from 'zod';

/** A setting is missing or wrong: the process says which and stops (never printing a value). */
export class ConfigurationError extends Error {
  readonly code = 'CONFIGURATION';
}

const postgresUrl = z
  .string()
  .refine((value) => /^postgres(ql)?:\/\//.test(value) && URL.canParse(value), 'must be a postgres:// connection URL');

/** The connection settings: server/config.ts spreads them into its schema. */
export const databaseVariables = {
  DATABASE_URL: postgresUrl.optional(),
  DASHBOARD_DATABASE_URL: postgresUrl.optional(),
  /** A hot standby the dashboard reads from (server/dashboard-pools.ts); every write still goes to the primary. */
  DASHBOARD_READ_URL: postgresUrl.optional(),
  /**
   * `transaction`: DATABASE_URL goes through a transaction-mode pooler (no startup parameters, no
   * named statements, no session state). `transaction-prepared`: the same, through a pooler that
   * tracks named statements (PgBouncer 1.21 and later, max_prepared_statements above 0): the
   * store's request path keeps its named statements, planned once per server connection.
   */
  DATABASE_POOLER: z.enum(['transaction', 'transaction-prepared'], { error: 'must be transaction or transaction-prepared (or unset, for a direct connection)' }).optional(),
  /** A direct (session) connection for migrations and the leader-elected duties when DATABASE_URL is pooled (default: DATABASE_URL). */
  DATABASE_DIRECT_URL: postgresUrl.optional(),
};

const databaseSchema = z.object(databaseVariables);

export type DatabaseSettings = z.infer<typeof databaseSchema>;

/** `source` through `schema`, empty variables as unset; a ConfigurationError names each variable and rule, never a value (it may be a secret). */
export function readVariables<Schema extends z.ZodType>(schema: Schema, source: NodeJS.ProcessEnv): z.infer<Schema> {
  const present = Object.fromEntries(Object.entries(source).filter(([, value]) => value !== undefined && value !== ''));
  const parsed = schema.safeParse(present);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
    throw new ConfigurationError(`Invalid configuration: ${problems.join('; ')}`);
  }
  return parsed.data;
}

/** The connection settings of `source` (default: this process's environment). */
export function readDatabaseSettings(source: NodeJS.ProcessEnv = process.env): DatabaseSettings {
  return readVariables(databaseSchema, source);
}
