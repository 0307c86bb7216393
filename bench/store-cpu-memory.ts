// The store's own CPU per request, without Postgres: IdempotencyStore.execute on an in-memory
// backend (every operation answers at once), with the flow recorder and a loaded quota, so what
// is measured is the store's layer alone (fingerprint, quota, sealing, decisions, recording,
// promise hops). No I/O, so the minimum over rounds is steady even on a loaded machine.
//   node --conditions=retrysafe-source --import tsx bench/store-cpu-memory.ts [module ...]
// Each module is a build of @retrysafe/store to compare (default: the package itself), e.g. a
// dist/index.js compiled from another commit; their rounds alternate, so all see the same machine.
import { randomBytes, randomUUID } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import type * as Store from '@retrysafe/store';
import type { ClaimResult } from '@retrysafe/store/postgres';
import { BENCH_ENDPOINT, BENCH_SERVICE, benchBody, benchPolicy, benchResponse } from './fixtures';

const ROUNDS = Number(process.env.CPU_ROUNDS ?? 15);
const REQUESTS = Number(process.env.CPU_REQUESTS ?? 10000);

type Backend = Store.IdempotencyBackend;
const nowhere = { query: () => Promise.reject(new Error('no database')) } as unknown as Store.Queryable;
const claimed: ClaimResult = { claimed: true, attempts: 1 };

function memoryBackend(): Backend {
  const tx: Store.BackendTransaction = {
    db: nowhere,
    begun: Promise.resolve(),
    claim: () => Promise.resolve(claimed),
    read: () => Promise.resolve(null),
    takeOver: () => Promise.resolve(null),
    complete: () => Promise.resolve(true),
    fail: () => Promise.resolve(true),
    completeAndCommit: () => Promise.resolve(),
    rollback: () => Promise.resolve(),
    abandon: () => undefined,
    release: () => undefined,
  };
  return { ...tx, isLockTimeout: () => false, transaction: () => Promise.resolve(tx) };
}

async function storeFrom(specifier: string) {
  const module = (await import(specifier.startsWith('.') || specifier.startsWith('/') ? pathToFileURL(specifier).href : specifier)) as typeof Store;
  // Not started and never flushed: the quota's first read is answered here, not by the database.
  const pool = new pg.Pool({ max: 1 });
  const quota = new module.LiveKeyQuota(pool, { service: BENCH_SERVICE });
  (quota as unknown as { refresh: () => Promise<void> }).refresh = () => Promise.resolve();
  return new module.IdempotencyStore({
    backend: memoryBackend(),
    service: BENCH_SERVICE,
    fingerprintSecret: randomBytes(32),
    keyRing: new module.ResponseKeyRing([{ id: 'k1', key: randomBytes(32) }]),
    quota,
    observer: new module.FlowRecorder(pool),
  });
}

async function main(): Promise<void> {
  const specifiers = process.argv.slice(2).length > 0 ? process.argv.slice(2) : ['@retrysafe/store'];
  const stores = await Promise.all(specifiers.map(storeFrom));
  const principalId = randomUUID();
  const run = async (store: Store.IdempotencyStore, mode: Store.ExecutionMode, requests: number, prefix: string) => {
    const started = process.cpuUsage();
    for (let i = 0; i < requests; i += 1) {
      await store.execute({
        principalId,
        endpoint: BENCH_ENDPOINT,
        method: 'POST',
        key: `${prefix}-${i}`,
        body: benchBody,
        policy: benchPolicy,
        mode,
        work: () => Promise.resolve({ status: 201, contentType: 'application/json', body: benchResponse }),
      });
    }
    const used = process.cpuUsage(started);
    return (used.user + used.system) / requests;
  };
  for (const mode of ['claim-first', 'transactional'] as const) {
    const rounds = stores.map(() => [] as number[]);
    for (const [index, store] of stores.entries()) await run(store, mode, REQUESTS, `warm-${mode}-${index}`);
    for (let round = 0; round < ROUNDS; round += 1) {
      for (const [index, store] of stores.entries()) rounds[index]?.push(await run(store, mode, REQUESTS, `${mode}-${round}-${index}`));
    }
    for (const [index, values] of rounds.entries()) {
      values.sort((a, b) => a - b);
      process.stdout.write(`${mode.padEnd(13)} ${specifiers[index]}: store layer CPU us/request min ${values[0]?.toFixed(2)}, median ${values[Math.floor(values.length / 2)]?.toFixed(2)}\n`);
    }
  }
}

void main();
