// The services and scopes the overview's URL may name: those with a policy, and a name the URL
// asks for that only recorded flow knows (a route with its own policy, unknown to the database).
import type { Queryable } from '@retrysafe/store/postgres';
import { knownScopes } from '../retention/policies';

export interface OverviewNames {
  services: string[];
  scopes: { service: string; scope: string }[];
}

export async function knownOverviewNames(db: Queryable, asked: { service?: string | undefined; scope?: string | undefined }): Promise<OverviewNames> {
  const scopes = await knownScopes(db);
  const names: OverviewNames = { services: [...new Set(scopes.map((scope) => scope.service))], scopes };
  const service = asked.service === '' ? undefined : asked.service;
  const scope = asked.scope === '' ? undefined : asked.scope;
  const knownService = service === undefined || names.services.includes(service);
  const knownScope = scope === undefined || scopes.some((known) => known.scope === scope && (service === undefined || known.service === service));
  if (knownService && knownScope) return names;
  // Only for a name no policy has (an old or hand-edited link): any bucket still kept of it.
  const { rows } = await db.query<{ service: string; scope: string }>(
    `(SELECT service, scope FROM flow_counts_minute WHERE ($1::text IS NULL OR service = $1) AND ($2::text IS NULL OR scope = $2) LIMIT 1)
     UNION ALL
     (SELECT service, scope FROM flow_counts_hour WHERE ($1::text IS NULL OR service = $1) AND ($2::text IS NULL OR scope = $2) LIMIT 1)`,
    [service ?? null, scope ?? null],
  );
  for (const row of rows) {
    if (!names.services.includes(row.service)) names.services.push(row.service);
    names.scopes.push(row);
  }
  return names;
}
