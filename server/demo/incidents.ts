// Incidents staged for practice (#31 point 9): `npm run cli -- demo incident KIND --minutes N`
// creates a tenant of the incident's own and a row of demo_incidents; the running server's
// traffic generator (server/demo/traffic.ts) polls the incidents not yet over and plays each
// with that tenant until it ends.
import type pg from 'pg';
import { z } from 'zod';
import type { Queryable } from '@retrysafe/store/postgres';
import { createTenant } from './tenants';

export const incidentKinds = ['noisy-tenant', 'key-reuse', 'slow-claims'] as const;
export type IncidentKind = (typeof incidentKinds)[number];

/** The tenant each incident is played by (a new one per staging: the principals table names it). */
export const incidentTenantNames: Record<IncidentKind, string> = {
  'noisy-tenant': 'Drill: noisy tenant',
  'key-reuse': 'Drill: key reuse',
  'slow-claims': 'Drill: slow claims',
};

export const stageIncidentInput = z.strictObject({
  kind: z.enum(incidentKinds, { error: `must be one of ${incidentKinds.join(', ')}` }),
  minutes: z.coerce.number({ error: 'must be a whole number of minutes' }).int('must be a whole number of minutes').min(1, 'must be 1 to 60').max(60, 'must be 1 to 60'),
});
export type StageIncidentInput = z.infer<typeof stageIncidentInput>;

export interface StagedIncident {
  incident: IncidentKind;
  tenant: { principalId: string; name: string };
  until: string;
}

/**
 * Creates the incident's tenant and its row, in one transaction. The tenant's API key is not
 * kept: the generator that plays the incident issues itself one (issueApiKey), so no secret is
 * stored or printed.
 */
export async function stageIncident(pool: pg.Pool, input: StageIncidentInput): Promise<StagedIncident> {
  const db = await pool.connect();
  try {
    await db.query('BEGIN');
    const name = incidentTenantNames[input.kind];
    const tenant = await createTenant(db, name);
    const { rows } = await db.query<{ until: Date }>(
      `INSERT INTO demo_incidents (kind, principal_id, until) VALUES ($1, $2, now() + $3::int * interval '1 minute') RETURNING until`,
      [input.kind, tenant.principalId, input.minutes],
    );
    await db.query('COMMIT');
    const until = rows[0]?.until;
    if (!until) throw new Error('incident insert returned no row');
    return { incident: input.kind, tenant: { principalId: tenant.principalId, name }, until: until.toISOString() };
  } catch (error) {
    await db.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    db.release();
  }
}

export interface ActiveIncident {
  id: string;
  kind: IncidentKind;
  principalId: string;
  until: Date;
}

const kindSchema = z.enum(incidentKinds);

/** The incidents not yet over: a range of demo_incidents_until_idx. */
export async function readActiveIncidents(db: Queryable): Promise<ActiveIncident[]> {
  const { rows } = await db.query<{ id: string; kind: string; principal_id: string; until: Date }>({
    name: 'demo_active_incidents',
    text: 'SELECT id, kind, principal_id, until FROM demo_incidents WHERE until > now() ORDER BY starts_at',
  });
  return rows.flatMap((row) => {
    const kind = kindSchema.safeParse(row.kind);
    return kind.success ? [{ id: row.id, kind: kind.data, principalId: row.principal_id, until: row.until }] : [];
  });
}
