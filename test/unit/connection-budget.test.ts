// Issue #29, point 3: an instance's connection budget is stated and configurable
// (DATABASE_CONNECTIONS, default 45) and split between its pools, which open at most their share.
import { describe, expect, it } from 'vitest';
import { connectionBudget, DEFAULT_CONNECTIONS } from '../../server/connection-budget';
import { readEnvironment, requireDashboardSettings } from '../../server/config';
import { createDashboardPools, createAuthPool } from '../../server/dashboard-pools';

/** Variables as a process environment (Next's types make NODE_ENV required). */
const env = (variables: Record<string, string>) => ({ NODE_ENV: 'test', ...variables }) as NodeJS.ProcessEnv;
const sum = (budget: ReturnType<typeof connectionBudget>) => budget.store + budget.app + budget.dashboard + budget.auth;
const base = { DATABASE_URL: 'postgres://owner:secret@127.0.0.1:1/app', DASHBOARD_DATABASE_URL: 'postgres://dashboard:secret@127.0.0.1:1/app', AUTH_SECRET: 'x'.repeat(32) };

describe('the connection budget', () => {
  it('is 45 by default, split as the pools were fixed before (store 20, app 10, dashboard 10, sign-in 5)', () => {
    expect(readEnvironment(env({})).DATABASE_CONNECTIONS).toBe(DEFAULT_CONNECTIONS);
    expect(connectionBudget()).toEqual({ store: 20, app: 10, dashboard: 10, auth: 5 });
  });

  it('sums to the figure set, each pool at least its floor, the rest to the store', () => {
    for (const total of [6, 7, 12, 30, 46, 100, 997]) {
      const budget = connectionBudget(total);
      expect(sum(budget)).toBe(total);
      expect(budget.store).toBeGreaterThanOrEqual(2);
      expect(budget.app).toBeGreaterThanOrEqual(2);
      expect(budget.dashboard).toBeGreaterThanOrEqual(1);
      expect(budget.auth).toBeGreaterThanOrEqual(1);
      expect(budget.store).toBeGreaterThanOrEqual(budget.app);
    }
    expect(connectionBudget(6)).toEqual({ store: 2, app: 2, dashboard: 1, auth: 1 });
  });

  it('refuses a figure too small for every pool to make progress, naming the setting and not its neighbours', () => {
    expect(() => readEnvironment(env({ DATABASE_CONNECTIONS: '5' }))).toThrow(/DATABASE_CONNECTIONS/);
    expect(() => readEnvironment(env({ DATABASE_CONNECTIONS: 'many' }))).toThrow(/DATABASE_CONNECTIONS/);
    expect(() => connectionBudget(5)).toThrow(RangeError);
  });

  it("gives the dashboard's and sign-in's pools their share of DATABASE_CONNECTIONS", async () => {
    const environment = readEnvironment(env({ ...base, DATABASE_CONNECTIONS: '18' }));
    const budget = connectionBudget(18);
    const pools = createDashboardPools(requireDashboardSettings(environment));
    const auth = createAuthPool(base.DATABASE_URL, budget.auth);
    try {
      expect(pools.pool.options.max).toBe(budget.dashboard);
      expect(auth.options.max).toBe(budget.auth);
      expect(budget).toEqual({ store: 8, app: 4, dashboard: 4, auth: 2 });
    } finally {
      await pools.end();
      await auth.end();
    }
  });
});
