// Where a key of a principal may have a record, for backends that keep key records outside
// Postgres (Redis, MySQL): the (service, scope) pairs the published and declared policies know, in
// the Postgres that holds the policies. A lookup probes each pair's record by its full identity,
// as Postgres probes its primary key once per scope, so a principal with millions of keys costs the same.
import type { Queryable } from './statements.js';

const SCOPES_SQL = `SELECT service, CASE WHEN scope_mode = 'intent' THEN 'intent' ELSE endpoint END AS scope FROM retrysafe.endpoint_policies WHERE $1::text IS NULL OR service = $1
  UNION SELECT service, CASE WHEN scope_mode = 'intent' THEN 'intent' ELSE endpoint END AS scope FROM retrysafe.endpoint_policy_declarations WHERE $1::text IS NULL OR service = $1
  ORDER BY service, scope`;
const SERVICES_SQL = `SELECT DISTINCT service FROM retrysafe.endpoint_policies UNION SELECT DISTINCT service FROM retrysafe.endpoint_policy_declarations ORDER BY service`;

/** The (service, scope) pairs of every service's policies, or of `service`'s; ordered by service, scope. */
export async function knownScopes(db: Queryable, service?: string): Promise<{ service: string; scope: string }[]> {
  return (await db.query<{ service: string; scope: string }>({ text: SCOPES_SQL, values: [service ?? null] })).rows;
}

/** Every service with a policy. */
export async function knownServices(db: Queryable): Promise<string[]> {
  return (await db.query<{ service: string }>({ text: SERVICES_SQL })).rows.map((row) => row.service);
}
