// The demo API in-process over a test database: the same handlers the routes use.
import type pg from 'pg';
import { createDemoApi, type DemoApi } from '../../server/demo/api';
import { FakeProcessor } from '../../server/demo/processor';
import { createTenant, type CreatedTenant } from '../../server/demo/tenants';
import type { EndpointPolicy } from '@retrysafe/store';
import type { LiveKeyQuota } from '@retrysafe/store';
import { createTestStore } from '../../packages/store/test/helpers/store';

export interface DemoHarness {
  api: DemoApi;
  processor: { failNext: boolean };
  tenant(name?: string): Promise<CreatedTenant>;
}

export function createDemoHarness(pool: pg.Pool, options: { policyFor?: (endpoint: string) => EndpointPolicy; quota?: LiveKeyQuota } = {}): DemoHarness {
  const control = { failNext: false };
  const processor = new FakeProcessor({
    latencyMs: 0,
    failureRate: 0,
    fails: () => {
      const fail = control.failNext;
      control.failNext = false;
      return fail;
    },
  });
  const { store } = createTestStore(pool, { quota: options.quota });
  const api = createDemoApi({ store, pool, processor, policyFor: options.policyFor });
  return { api, processor: control, tenant: (name = 'tenant') => createTenant(pool, name) };
}

export function post(path: string, options: { apiKey?: string; key?: string | null; body?: unknown; raw?: string; headers?: Record<string, string> }): Request {
  const headers: Record<string, string> = { 'Content-Type': 'application/json', ...options.headers };
  if (options.apiKey !== undefined) headers.Authorization = `Bearer ${options.apiKey}`;
  if (options.key !== undefined && options.key !== null) headers['Idempotency-Key'] = options.key;
  return new Request(`http://localhost${path}`, {
    method: 'POST',
    headers,
    body: options.raw ?? JSON.stringify(options.body ?? {}),
  });
}
