// The bridge from Next's server code to server/: process-wide resources created once.
// Kept on globalThis because Next may evaluate this module in more than one bundle.
import 'server-only';
import type pg from 'pg';
import { createPool } from '@/db/client';
import { readEnvironment, requireDatabaseUrl, requireStoreSecrets } from '@/server/config';
import { createDemoApi, type DemoApi } from '@/server/demo/api';
import { FakeProcessor } from '@/server/demo/processor';
import { LiveKeyQuota } from '@/server/idempotency/quota';
import { ResponseKeyRing } from '@/server/idempotency/response-codec';
import { IdempotencyStore } from '@/server/idempotency/store';

interface Runtime {
  ownerPool: pg.Pool;
  store: IdempotencyStore;
  demo: DemoApi;
}

const slot = Symbol.for('retrysafe.runtime');
type Holder = typeof globalThis & { [slot]?: Runtime };

function logError(message: string, error: unknown, correlationId?: string): void {
  // Name and message only: errors from the store never carry request or response bodies,
  // and nothing else is logged from a request.
  const reason = error instanceof Error ? `${error.name}: ${error.message}` : 'unknown error';
  console.error(JSON.stringify({ level: 'error', message, reason, correlationId }));
}

function createRuntime(): Runtime {
  const environment = readEnvironment();
  const secrets = requireStoreSecrets(environment);
  const ownerPool = createPool(requireDatabaseUrl(environment), { applicationName: 'retrysafe-app', max: 20, connectionTimeoutMillis: 2_000 });
  const quota = new LiveKeyQuota(ownerPool, { onError: (error) => logError('quota flush failed', error) });
  quota.start();
  const store = new IdempotencyStore({
    pool: ownerPool,
    fingerprintSecret: secrets.fingerprintSecret,
    keyRing: new ResponseKeyRing(secrets.encryptionKeys),
    quota,
    onLeaseLost: (id) => logError('attempt finished after its lease was taken over', new Error(`scope ${id.scope}`)),
  });
  const processor = new FakeProcessor({
    latencyMs: environment.DEMO_PROCESSOR_LATENCY_MS,
    failureRate: environment.DEMO_PROCESSOR_FAILURE_RATE,
  });
  const demo = createDemoApi({ store, pool: ownerPool, processor, onError: (error, correlationId) => logError('request failed', error, correlationId) });
  return { ownerPool, store, demo };
}

export function runtime(): Runtime {
  const holder = globalThis as Holder;
  holder[slot] ??= createRuntime();
  return holder[slot];
}
