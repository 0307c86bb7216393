// Principals for the dashboard: the search by display name (for /keys) and the overview's
// "principals behind conflicts, mismatches, rejections and stale claims" for a time range,
// service and scope. The flow counts come from the recorder's top-K summaries
// (principal_flow_minute/hour): lower bounds, each short by at most N/(k+1), N the range's
// events of that outcome in the selection; stale claims are counted exactly from the key
// table's in-progress index.
import { z } from 'zod';
import { ALL, PRINCIPAL_TOP_K, type PrincipalOutcome } from '@retrysafe/store';
import type { Queryable } from '@retrysafe/store/postgres';
import { storableText } from '../storable';
import { STALE_LEASE_INDEX_PREDICATE } from '../../db/schema/idempotency-keys';

export const principalSearchQuery = z.strictObject({
  /** A display-name prefix (case-insensitive), or a whole principal id. */
  name: storableText().trim().min(1, 'type the start of a principal name').max(200),
  limit: z.coerce.number().int().min(1).max(50).default(20),
});
export type PrincipalSearch = z.infer<typeof principalSearchQuery>;

export interface NamedPrincipal {
  principalId: string;
  name: string | null;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The least string greater than every string starting with `prefix`, in code point order (null: none). */
function prefixUpperBound(prefix: string): string | null {
  const points = Array.from(prefix);
  while (points.length > 0) {
    const last = (points.pop() ?? '').codePointAt(0) ?? 0;
    let next = last + 1;
    if (next >= 0xd800 && next <= 0xdfff) next = 0xe000;
    if (next <= 0x10ffff) return points.join('') + String.fromCodePoint(next);
  }
  return null;
}

/**
 * Principals whose name starts with the prefix, case-insensitively, in name order: one range
 * of principal_names_name_prefix_idx (lower(name) in byte order, which is code point order in
 * UTF-8). A whole principal id finds that principal, named or not.
 */
export async function searchPrincipals(db: Queryable, search: PrincipalSearch): Promise<NamedPrincipal[]> {
  if (UUID.test(search.name)) {
    const { rows } = await db.query<{ name: string | null }>('SELECT name FROM principal_names WHERE principal_id = $1', [search.name]);
    return [{ principalId: search.name.toLowerCase(), name: rows[0]?.name ?? null }];
  }
  const prefix = search.name.toLowerCase();
  const { rows } = await db.query<{ principal_id: string; name: string }>({
    name: 'dashboard_principal_search',
    text: `SELECT principal_id, name FROM principal_names
           WHERE lower(name) COLLATE "C" >= $1 AND ($2::text IS NULL OR lower(name) COLLATE "C" < $2) AND starts_with(lower(name), $1)
           ORDER BY lower(name) COLLATE "C", principal_id LIMIT $3`,
    values: [prefix, prefixUpperBound(prefix), search.limit],
  });
  return rows.map((row) => ({ principalId: row.principal_id, name: row.name }));
}

/** Display names of these principals (primary-key probes); absent ids have none. */
export async function readPrincipalNames(db: Queryable, principalIds: string[]): Promise<Map<string, string>> {
  if (principalIds.length === 0) return new Map();
  const { rows } = await db.query<{ principal_id: string; name: string }>('SELECT principal_id, name FROM principal_names WHERE principal_id = ANY($1::uuid[])', [principalIds]);
  return new Map(rows.map((row) => [row.principal_id, row.name]));
}

/** The outcomes the table lists principals for (their counts add up to the row's weight). */
export const troubleOutcomes = ['conflict', 'mismatch', 'rejected', 'takeover', 'error'] as const satisfies readonly PrincipalOutcome[];
export type TroubleOutcome = (typeof troubleOutcomes)[number];

export interface PrincipalBehind {
  principalId: string;
  name: string | null;
  counts: Record<PrincipalOutcome, number>;
  /** In-progress claims past their lease, now (exact). */
  staleClaims: number;
  /** Each outcome's share of the principal's claims (null when its claims are not among the top-K). */
  share: Record<TroubleOutcome, number | null>;
}

export interface PrincipalsBehind {
  /** Counters per summary (k). */
  k: number;
  /** Per outcome, the most a count may fall short of the truth in this range and selection: N/(k+1). */
  errorBound: Record<TroubleOutcome | 'claims', number>;
  principals: PrincipalBehind[];
}

export interface PrincipalsSelection {
  from: Date;
  to: Date;
  service: string | null;
  scope: string | null;
  /** The services of the range (for a scope chosen without a service: its rows in each). */
  services: string[];
  /** The range's events per outcome in the selection (from the flow counts), for the bound. */
  totals: Record<TroubleOutcome | 'claims', number>;
}

const ROWS_SHOWN = 20;

/**
 * The principals behind the trouble in a range: the top-K rows of the chosen (service, scope)
 * (or the merged '*' rows when none is chosen), minute rows for what is not rolled up and hour
 * rows for the rest, each one range of its table's primary key (service, scope, time first);
 * plus the stale claims per principal, a range of the stale-lease index. Ranked by the sum of
 * their trouble and stale claims; at most 20.
 *
 * One statement ranks every principal of the range and returns only the 20 (their counts per
 * outcome and their stale claims), rather than every principal's counts for the app to rank;
 * every stale claim of the selection counts toward its principal's weight.
 */
export async function readPrincipalsBehind(db: Queryable, selection: PrincipalsSelection): Promise<PrincipalsBehind> {
  const services = selection.service !== null ? [selection.service] : selection.scope !== null ? selection.services : [ALL];
  const scope = selection.scope ?? ALL;
  const { rows } = await db.query<{ principal_id: string; outcome: PrincipalOutcome | null; n: string | null; stale: string }>({
    name: 'dashboard_principals_behind',
    text: `WITH stale AS (
             SELECT principal_id, count(*) AS n FROM idempotency_keys
             WHERE ${STALE_LEASE_INDEX_PREDICATE} AND state = 'in_progress' AND lease_expires_at < now()
               AND ($5::text IS NULL OR service = $5) AND ($6::text IS NULL OR scope = $6)
             GROUP BY principal_id
           ), flow AS (
             SELECT principal_id, outcome, sum(count) AS n FROM (
               SELECT principal_id, outcome, count FROM principal_flow_minute
               WHERE service = ANY($1::text[]) AND scope = $2 AND minute >= $3 AND minute < $4
               UNION ALL
               SELECT principal_id, outcome, count FROM principal_flow_hour
               WHERE service = ANY($1::text[]) AND scope = $2 AND hour >= $3 AND hour < $4
             ) u GROUP BY 1, 2
           ), ranked AS (
             SELECT principal_id FROM (
               SELECT principal_id, n FROM flow WHERE outcome <> 'claims'
               UNION ALL
               SELECT principal_id, n FROM stale
             ) t GROUP BY principal_id HAVING sum(n) > 0
             ORDER BY sum(n) DESC, principal_id LIMIT ${ROWS_SHOWN}
           )
           SELECT r.principal_id, f.outcome, f.n, coalesce(s.n, 0) AS stale
           FROM ranked r LEFT JOIN flow f ON f.principal_id = r.principal_id LEFT JOIN stale s ON s.principal_id = r.principal_id`,
    values: [services, scope, selection.from, selection.to, selection.service, selection.scope],
  });
  const byPrincipal = new Map<string, { counts: Record<PrincipalOutcome, number>; staleClaims: number }>();
  const entry = (principalId: string) => {
    let found = byPrincipal.get(principalId);
    if (!found) {
      found = { counts: { conflict: 0, mismatch: 0, rejected: 0, takeover: 0, error: 0, claims: 0 }, staleClaims: 0 };
      byPrincipal.set(principalId, found);
    }
    return found;
  };
  for (const row of rows) {
    const found = entry(row.principal_id);
    if (row.outcome !== null) found.counts[row.outcome] += Number(row.n);
    found.staleClaims = Number(row.stale);
  }
  const weight = (value: { counts: Record<PrincipalOutcome, number>; staleClaims: number }) =>
    troubleOutcomes.reduce((sum, outcome) => sum + value.counts[outcome], 0) + value.staleClaims;
  const ranked = [...byPrincipal]
    .filter(([, value]) => weight(value) > 0)
    .sort((a, b) => weight(b[1]) - weight(a[1]) || (a[0] < b[0] ? -1 : 1))
    .slice(0, ROWS_SHOWN);
  const names = await readPrincipalNames(
    db,
    ranked.map(([principalId]) => principalId),
  );
  const k = PRINCIPAL_TOP_K;
  return {
    k,
    errorBound: Object.fromEntries(Object.entries(selection.totals).map(([outcome, n]) => [outcome, n / (k + 1)])) as PrincipalsBehind['errorBound'],
    principals: ranked.map(([principalId, value]) => ({
      principalId,
      name: names.get(principalId) ?? null,
      counts: value.counts,
      staleClaims: value.staleClaims,
      share: Object.fromEntries(
        troubleOutcomes.map((outcome) => [outcome, value.counts.claims > 0 ? Math.min(1, value.counts[outcome] / value.counts.claims) : null]),
      ) as Record<TroubleOutcome, number | null>,
    })),
  };
}
