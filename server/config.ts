// One zod-validated view of the environment. Empty variables count as unset, so
// `DATABASE_URL= npm start` means "use the default", not "connect to ''".
import { z } from 'zod';

const postgresUrl = z
  .string()
  .refine((value) => /^postgres(ql)?:\/\//.test(value) && URL.canParse(value), 'must be a postgres:// connection URL');

const environmentSchema = z.object({
  DATABASE_URL: postgresUrl.optional(),
  PORT: z.coerce.number().int().min(1).max(65535).default(3000),
  /** Interface the server binds; loopback by default so a demo is not exposed to the network. */
  HOST: z.string().min(1).default('127.0.0.1'),
});

export type Environment = z.infer<typeof environmentSchema>;

export class ConfigurationError extends Error {
  readonly code = 'CONFIGURATION';
}

export function readEnvironment(source: NodeJS.ProcessEnv = process.env): Environment {
  const present = Object.fromEntries(Object.entries(source).filter(([, value]) => value !== undefined && value !== ''));
  const parsed = environmentSchema.safeParse(present);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
    throw new ConfigurationError(`Invalid configuration: ${problems.join('; ')}`);
  }
  return parsed.data;
}

/** The owner database URL, for code that only runs once the launcher has resolved it. */
export function requireDatabaseUrl(environment: Environment = readEnvironment()): string {
  if (!environment.DATABASE_URL) {
    throw new ConfigurationError('DATABASE_URL is not set: start the app with `npm start`, which provides one');
  }
  return environment.DATABASE_URL;
}
