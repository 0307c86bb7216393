// An instance's Postgres connections on the primary (or the pooler in front of it), one figure
// an operator sets (DATABASE_CONNECTIONS, default 45) and this split between the server's
// pools. Each pool opens connections on demand, up to its share. The store gets the largest
// share (every protected request's claim and completion, and a transactional endpoint's work),
// then the app's own pool (demo API, health, shared duties) and the dashboard's, then sign-in.

/** The default: the pools' maxima as they were fixed before the setting (20 + 10 + 10 + 5). */
export const DEFAULT_CONNECTIONS = 45;

/** The least that leaves each pool what it needs to make progress (the store two, the rest one or two). */
export const MIN_CONNECTIONS = 6;

export interface ConnectionBudget {
  /** `retrysafe-store`: the store's pool. */
  store: number;
  /** `retrysafe-app`: the demo API, health and the shared duties. */
  app: number;
  /** `retrysafe-dashboard` (and the same again on a standby, with DASHBOARD_READ_URL). */
  dashboard: number;
  /** `retrysafe-auth`: sign-in and sessions. */
  auth: number;
}

const SHARES: Record<keyof ConnectionBudget, number> = { store: 20, app: 10, dashboard: 10, auth: 5 };
const FLOORS: Record<keyof ConnectionBudget, number> = { store: 2, app: 2, dashboard: 1, auth: 1 };

/** `total` split in the default proportions (20:10:10:5), each at least its floor; the parts sum to `total`. */
export function connectionBudget(total: number = DEFAULT_CONNECTIONS): ConnectionBudget {
  if (!Number.isInteger(total) || total < MIN_CONNECTIONS) throw new RangeError(`a connection budget is a whole number of at least ${MIN_CONNECTIONS}, not ${total}`);
  const weight = Object.values(SHARES).reduce((sum, share) => sum + share, 0);
  const names = Object.keys(SHARES) as (keyof ConnectionBudget)[];
  const budget = Object.fromEntries(names.map((name) => [name, Math.max(FLOORS[name], Math.floor((total * SHARES[name]) / weight))])) as unknown as ConnectionBudget;
  // What rounding left over (or the floors took beyond the total) is the store's.
  budget.store += total - names.reduce((sum, name) => sum + budget[name], 0);
  return budget;
}
