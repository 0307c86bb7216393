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

/**
 * The principals that may have live keys of `service`, most recently active first, at most
 * `limit`: those with a live-key quota counter (retrysafe.idempotency_key_usage, which the store
 * keeps in Postgres for every service whose quota is on, whatever holds its keys) in a bucket
 * younger than the service's longest retention plus one hour (the quota's default bucket). For
 * backends that keep no index across principals (a Redis Cluster: every index sits in its
 * principal's slot). No index serves `service` alone: the counters are one row per principal,
 * scope, hour and instance, and the window's rows are read.
 */
export async function principalsWithLiveKeys(db: Queryable, service: string, limit: number): Promise<string[]> {
  const { rows } = await db.query<{ principal_id: string }>({
    text: `WITH horizon AS (
  SELECT max(retention_seconds) AS seconds FROM (
    SELECT retention_seconds FROM retrysafe.endpoint_policies WHERE service = $1
    UNION ALL SELECT retention_seconds FROM retrysafe.endpoint_policy_declarations WHERE service = $1) policies)
SELECT u.principal_id FROM retrysafe.idempotency_key_usage u, horizon h
WHERE u.service = $1 AND u.bucket_start > now() - (h.seconds + 3600) * interval '1 second'
GROUP BY u.principal_id ORDER BY max(u.bucket_start) DESC, u.principal_id LIMIT $2`,
    values: [service, limit],
  });
  return rows.map((row) => row.principal_id);
}
