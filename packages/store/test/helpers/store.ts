// A real store on a test file's database, with a recorder of its flow events.
import { join } from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import type pg from 'pg';
import type { FlowEvent, FlowObserver, PoolerMode } from '@retrysafe/store';
import type { EndpointPolicy, IdempotencyBackend } from '@retrysafe/store';
import { LiveKeyQuota } from '@retrysafe/store';
import { ResponseKeyRing, type ResponseKey } from '@retrysafe/store';
import { IdempotencyStore, type IdempotentCall, type WorkResult } from '@retrysafe/store';

/** The service a test store answers for unless told otherwise: `demo`, the one service of installs from before services existed (and the Retrysafe server's demo API's). */
export const TEST_SERVICE = 'demo';

export const testPolicy: EndpointPolicy = {
  scopeMode: 'endpoint',
  retryWindowMs: 3_600_000,
  retentionMs: 7_200_000,
  leaseMs: 10_000,
  lockTimeoutMs: 2_000,
  maxResponseBytes: 1_024,
  liveKeyQuota: 1_000_000,
};

export function newResponseKey(id = 'k1'): ResponseKey {
  return { id, key: randomBytes(32) };
}

export interface TestStore {
  store: IdempotencyStore;
  events: FlowEvent[];
  keyRing: ResponseKeyRing;
  secret: Buffer;
}

export function createTestStore(
  pool: pg.Pool,
  options: {
    service?: string;
    keys?: ResponseKey[];
    secret?: Buffer;
    quota?: LiveKeyQuota;
    onLeaseLost?: (id: { key: string }) => void;
    layout?: 'plain' | 'partitioned';
    /** The pool goes through a transaction-mode PgBouncer: createRetrysafe's `pooler` (true: `transaction`). */
    pooler?: boolean | PoolerMode;
    /** With `pooler`: the server connections have the planner settings already (no SET LOCAL per transaction). */
    plannerSettingsInPlace?: boolean;
    onCompletionFailed?: (error: unknown, id: { key: string }) => void;
    /** Also told every flow event (e.g. a FlowRecorder), after `events`. */
    observer?: FlowObserver;
    /** Keys kept here instead of in `pool`'s Postgres (e.g. a RedisBackend). */
    backend?: IdempotencyBackend;
  } = {},
): TestStore {
  const events: FlowEvent[] = [];
  const keyRing = new ResponseKeyRing(options.keys ?? [newResponseKey()]);
  const secret = options.secret ?? randomBytes(32);
  const store = new IdempotencyStore({
    pool,
    backend: options.backend,
    service: options.service ?? TEST_SERVICE,
    fingerprintSecret: secret,
    keyRing,
    quota: options.quota,
    onLeaseLost: options.onLeaseLost,
    layout: options.layout,
    pooler: options.pooler === true ? 'transaction' : options.pooler || undefined,
    plannerSettingsInPlace: options.plannerSettingsInPlace,
    onCompletionFailed: options.onCompletionFailed,
    observer: {
      record: (event) => {
        events.push(event);
        options.observer?.record(event);
      },
    },
  });
  return { store, events, keyRing, secret };
}

export function jsonResult(status: number, value: unknown, reference?: string): WorkResult {
  return { status, contentType: 'application/json', body: Buffer.from(JSON.stringify(value)), reference };
}

/** Key 'k' of POST /x with body {a: 1}, answered 201 {ok: true}, for `principalId` in `mode`. */
export function simpleCall(principalId: string, mode: IdempotentCall['mode'], extra: Partial<IdempotentCall> = {}): IdempotentCall {
  return {
    principalId,
    key: 'k',
    endpoint: 'POST /x',
    method: 'POST',
    body: { a: 1 },
    policy: testPolicy,
    mode,
    work: () => Promise.resolve(jsonResult(201, { ok: true })),
    ...extra,
  };
}

export const principal = () => randomUUID();
export const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

/** A promise and the function that resolves it: one step of a test waits for another's. */
export function signal(): [Promise<void>, () => void] {
  let resolve: () => void = () => undefined;
  const done = new Promise<void>((settle) => {
    resolve = settle;
  });
  return [done, resolve];
}
export { LiveKeyQuota };

/** A process that claims a key and hangs in its work until killed (argv: url, principal, key, leaseMs, secret hex, response key hex, layout or backend). */
export const CLAIM_AND_HANG = join(import.meta.dirname, '../fixtures/claim-and-hang.ts');
