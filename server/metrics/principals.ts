// Principals for the dashboard: the search by display name (for /keys) and the overview's
// "principals behind conflicts, mismatches, rejections and stale claims" for a time range,
// service and scope. The flow counts come from the recorder's top-K summaries
// (principal_flow_minute/hour/day): lower bounds, each short by at most N/(k+1), N the range's
// events of that outcome in the selection; stale claims are counted exactly from the key
// table's in-progress index.
import { z } from 'zod';
import { ALL, PRINCIPAL_TOP_K, principalOutcomes, type PrincipalOutcome } from '@retrysafe/store';
import type { Queryable } from '@retrysafe/store/postgres';
import { storableText } from '../storable';
import { STALE_LEASE_INDEX_PREDICATE } from '@retrysafe/store/index-predicates';

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
 * The table of the principals' counters a range reads (the flush writes all three, migration
 * 0023): minutes for up to an hour, hours for up to a day, days beyond; so a range reads at most
 * about 60, 24 or 31 buckets of top-K rows, however long it is. A bucket that starts before the
 * range does is left out, so the table may leave out up to an hour (or a day) at the range's
 * start; the error bound, from the whole range's events, still holds.
 */
export function principalLevel(from: Date, to: Date): { table: 'principal_flow_minute' | 'principal_flow_hour' | 'principal_flow_day'; column: 'minute' | 'hour' | 'day' } {
  const span = to.getTime() - from.getTime();
  if (span <= 3_600_000) return { table: 'principal_flow_minute', column: 'minute' };
  if (span <= 86_400_000) return { table: 'principal_flow_hour', column: 'hour' };
  return { table: 'principal_flow_day', column: 'day' };
}

/**
 * The principals behind the trouble in a range: the top-K rows of the chosen (service, scope)
 * (or the merged '*' rows when none is chosen) in the range's table (principalLevel), one range
 * of its primary key (service, scope, time first); plus the stale claims per principal, a range
 * of the stale-lease index. Ranked by the sum of their trouble and stale claims; at most 20.
 *
 * One statement sums each principal's counts per outcome in one pass, ranks every principal of
 * the range with its stale claims, and returns only the 20, rather than every principal's counts
 * for the app to rank; every stale claim of the selection counts toward its principal's weight.
 */
export async function readPrincipalsBehind(db: Queryable, selection: PrincipalsSelection): Promise<PrincipalsBehind> {
  const ranked = await readPrincipalsRanked(db, selection);
  return { ...ranked, errorBound: principalsErrorBound(selection.totals, ranked.k) };
}

/** Per outcome, the most a summed top-K count may fall short of the truth: N/(k+1) of the range's N events. */
export function principalsErrorBound(totals: PrincipalsSelection['totals'], k: number = PRINCIPAL_TOP_K): PrincipalsBehind['errorBound'] {
  return Object.fromEntries(Object.entries(totals).map(([outcome, n]) => [outcome, n / (k + 1)])) as PrincipalsBehind['errorBound'];
}

/** readPrincipalsBehind without the error bound (which needs the range's totals, read beside it). */
export async function readPrincipalsRanked(db: Queryable, selection: Omit<PrincipalsSelection, 'totals'>): Promise<Omit<PrincipalsBehind, 'errorBound'>> {
  const services = selection.service !== null ? [selection.service] : selection.scope !== null ? selection.services : [ALL];
  const scope = selection.scope ?? ALL;
  const { table, column } = principalLevel(selection.from, selection.to);
  // Sums as float8 (exact to 2^53): a pass-by-value aggregate state, not numeric's, which was a
  // fifth of this statement at 50 scopes.
  type Row = { principal_id: string; stale: string; name: string | null } & Record<PrincipalOutcome, number | null>;
  const { rows } = await db.query<Row>({
    name: `dashboard_principals_behind_${column}`,
    text: `WITH stale AS (
             SELECT principal_id, count(*) AS n FROM idempotency_keys
             WHERE ${STALE_LEASE_INDEX_PREDICATE} AND state = 'in_progress' AND lease_expires_at < now()
               AND ($5::text IS NULL OR service = $5) AND ($6::text IS NULL OR scope = $6)
             GROUP BY principal_id
           ), flow AS (
             SELECT principal_id,
                    ${principalOutcomes.map((outcome) => `sum(count::float8) FILTER (WHERE outcome = '${outcome}') AS ${outcome}`).join(',\n                    ')},
                    sum(count::float8) FILTER (WHERE outcome <> 'claims') AS trouble
             FROM ${table}
             WHERE service = ANY($1::text[]) AND scope = $2 AND ${column} >= $3 AND ${column} < $4
             GROUP BY principal_id
           ), ranked AS (
             SELECT coalesce(f.principal_id, s.principal_id) AS principal_id, ${principalOutcomes.map((outcome) => `f.${outcome}`).join(', ')}, coalesce(s.n, 0) AS stale,
                    coalesce(f.trouble, 0) + coalesce(s.n, 0) AS weight
             FROM flow f FULL JOIN stale s ON s.principal_id = f.principal_id
             WHERE coalesce(f.trouble, 0) + coalesce(s.n, 0) > 0
             ORDER BY weight DESC, 1
             LIMIT ${ROWS_SHOWN}
           )
           -- The 20's display names: a primary-key probe each (a scalar subquery, never a join
           -- that could read the whole table, which grows with the principals).
           SELECT r.*, (SELECT n.name FROM principal_names n WHERE n.principal_id = r.principal_id) AS name
           FROM ranked r ORDER BY r.weight DESC, r.principal_id`,
    values: [services, scope, selection.from, selection.to, selection.service, selection.scope],
  });
  return {
    k: PRINCIPAL_TOP_K,
    principals: rows.map((row) => {
      const counts = Object.fromEntries(principalOutcomes.map((outcome) => [outcome, row[outcome] ?? 0])) as Record<PrincipalOutcome, number>;
      return {
        principalId: row.principal_id,
        name: row.name,
        counts,
        staleClaims: Number(row.stale),
        share: Object.fromEntries(
          troubleOutcomes.map((outcome) => [outcome, counts.claims > 0 ? Math.min(1, counts[outcome] / counts.claims) : null]),
        ) as Record<TroubleOutcome, number | null>,
      };
    }),
  };
}
