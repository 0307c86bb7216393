// `npm run bench -- mysql`: the whole request through the MySQL/MariaDB backend
// (IdempotencyStore.execute with MysqlBackend: fingerprint, claim, trivial work, sealing,
// completion) beside the same statements issued raw with mysql2 in the same run, one connection
// per caller, new keys, in both modes, at 8 and 32 callers (BENCH_MYSQL_CALLERS), on a MariaDB
// server of its own (packages/store/test/helpers/mariadb-server.ts). Alternating rounds, so every side sees the
// same machine (each round in another order). Raw, per request:
//   claim-first   INSERT (claim), UPDATE (completion)                              two commits
//   transactional SELECT (no committed row), START TRANSACTION, INSERT, UPDATE, COMMIT
// Raw is mysql2 as an application uses it by default (its promise API, `trace` on: the caller's
// stack captured at every call). The store sends its statements through mysql2's callback API,
// without that capture; so a third side, raw with `trace: false`, shows the floor (same run).
// Node CPU per request is measured on every side. The store's flow recorder and quota
// (Postgres) are not in this figure. Target: store / raw >= 0.85x.
import { randomBytes, randomUUID } from 'node:crypto';
import mysql from 'mysql2/promise';
import { IdempotencyStore, ResponseKeyRing, newCorrelationId, problemFor, type ExecutionMode, type IdempotentCall } from '@retrysafe/store';
import { MysqlBackend, mysqlStatementTexts, type MysqlQueryable } from '@retrysafe/store/mysql';
import { startMariaDb } from '../packages/store/test/helpers/mariadb-server';
import { BENCH_ENDPOINT, BENCH_SERVICE, benchBody, benchPolicy, benchResponse } from './fixtures';
import { formatRun, meanRun, runClosedLoopWithCpu, type RunResult } from './measure';

const CALLERS = (process.env.BENCH_MYSQL_CALLERS ?? '8,32').split(',').map(Number);
const DURATION_MS = Number(process.env.BENCH_SECONDS ?? 3) * 1000;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const MODES: ExecutionMode[] = ['claim-first', 'transactional'];

export interface MysqlBenchCase {
  mode: ExecutionMode;
  callers: number;
  store: RunResult;
  raw: RunResult;
  /** Raw with mysql2's `trace: false` (no caller stack captured per call). */
  rawUntraced: RunResult;
  ratio: number;
  /** store / rawUntraced. */
  ratioUntraced: number;
  /** Node CPU (user + system) per request over the measured windows, microseconds. */
  storeCpuMicros: number;
  rawCpuMicros: number;
  rawUntracedCpuMicros: number;
  /**
   * Requests that ended in what a client gets as 503 and retries (problemFor: a transaction InnoDB
   * rolled back to break a deadlock, 1213), per side, over every round: counted, never timed.
   */
  retryable: { store: number; raw: number; rawUntraced: number };
}

export interface MysqlBenchReport {
  server: string;
  cases: MysqlBenchCase[];
}

export async function benchMysql(log: (line: string) => void): Promise<MysqlBenchReport> {
  const server = await startMariaDb({ migrated: true });
  const report: MysqlBenchReport = { server: server.version, cases: [] };
  log(`MariaDB ${server.version}`);
  try {
    const maxCallers = Math.max(...CALLERS);
    const pool = server.pool(maxCallers + 2);
    const store = new IdempotencyStore<MysqlQueryable>({
      backend: new MysqlBackend(pool),
      service: BENCH_SERVICE,
      fingerprintSecret: randomBytes(32),
      keyRing: new ResponseKeyRing([{ id: 'k1', key: randomBytes(32) }]),
    });
    const rawConnections = await Promise.all(Array.from({ length: maxCallers }, () => mysql.createConnection({ uri: server.uri, timezone: 'Z' })));
    const untracedConnections = await Promise.all(Array.from({ length: maxCallers }, () => mysql.createConnection({ uri: server.uri, timezone: 'Z', trace: false })));
    const principals = Array.from({ length: maxCallers }, () => randomUUID());
    const sealed = randomBytes(benchResponse.length + 28);
    const fingerprint = randomBytes(32);
    const scope = Buffer.from(BENCH_ENDPOINT);
    const principalOf = (worker: number): string => {
      const principalId = principals[worker];
      if (principalId === undefined) throw new Error(`no principal for worker ${worker}`);
      return principalId;
    };
    const pk = (worker: number, key: string): [string, string, Buffer, Buffer] => [principalOf(worker), BENCH_SERVICE, scope, Buffer.from(key)];

    // A request that ends in a 503 a client retries (a deadlock's rollback) is counted, not timed
    // as a success; anything else ends the bench.
    const retryable = { store: 0, raw: 0, rawUntraced: 0 };
    const counting =
      (side: keyof typeof retryable, request: (worker: number) => Promise<void>) =>
      async (worker: number): Promise<void> => {
        try {
          await request(worker);
        } catch (error) {
          if (problemFor(error)?.status !== 503) throw error;
          retryable[side] += 1;
          // The raw side's connection may still be in its transaction (a deadlock ends it; other 503s may not).
          if (side !== 'store') await (side === 'raw' ? rawConnections : untracedConnections)[worker]?.query('ROLLBACK');
        }
      };
    const storeRequest = (mode: ExecutionMode) => async (worker: number) => {
      const call: IdempotentCall<MysqlQueryable> = {
        principalId: principalOf(worker),
        endpoint: BENCH_ENDPOINT,
        method: 'POST',
        key: randomUUID(),
        body: benchBody,
        policy: benchPolicy,
        mode,
        work: () => Promise.resolve({ status: 201, contentType: 'application/json', body: benchResponse }),
      };
      await store.execute(call);
    };
    const rawRequest = (mode: ExecutionMode, connections = rawConnections) => async (worker: number) => {
      const connection = connections[worker];
      if (!connection) throw new Error('no connection');
      const key = randomUUID();
      const id = pk(worker, key);
      const claim = [...id, fingerprint, newCorrelationId(), benchPolicy.leaseMs * 1000, benchPolicy.retentionMs * 1000];
      const complete = [201, 'application/json', sealed, 'k1', benchResponse.length, null, ...id, 1];
      if (mode === 'claim-first') {
        await connection.execute(mysqlStatementTexts.claim, claim);
        await connection.execute(mysqlStatementTexts.complete, complete);
        return;
      }
      await connection.execute(mysqlStatementTexts.read, id);
      await connection.query('START TRANSACTION');
      await connection.execute(mysqlStatementTexts.claim, claim);
      await connection.execute(mysqlStatementTexts.complete, complete);
      await connection.query('COMMIT');
    };

    for (const mode of MODES) {
      for (const callers of CALLERS) {
        Object.assign(retryable, { store: 0, raw: 0, rawUntraced: 0 });
        const storeRuns: RunResult[] = [];
        const rawRuns: RunResult[] = [];
        const storeCpu: number[] = [];
        const rawCpu: number[] = [];
        const untracedRuns: RunResult[] = [];
        const untracedCpu: number[] = [];
        // Each round runs the three sides in another order (rotated), so none always follows the
        // same one (InnoDB's purge of the side before, the machine's other work) more than another.
        const sides = [
          async () => {
            const raw = await runClosedLoopWithCpu(callers, DURATION_MS / ROUNDS, counting('raw', rawRequest(mode)));
            rawRuns.push(raw.run);
            rawCpu.push(raw.cpuMicrosPerRequest);
          },
          async () => {
            const untraced = await runClosedLoopWithCpu(callers, DURATION_MS / ROUNDS, counting('rawUntraced', rawRequest(mode, untracedConnections)));
            untracedRuns.push(untraced.run);
            untracedCpu.push(untraced.cpuMicrosPerRequest);
          },
          async () => {
            const ours = await runClosedLoopWithCpu(callers, DURATION_MS / ROUNDS, counting('store', storeRequest(mode)));
            storeRuns.push(ours.run);
            storeCpu.push(ours.cpuMicrosPerRequest);
          },
        ];
        for (let round = 0; round < ROUNDS; round += 1) {
          for (let index = 0; index < sides.length; index += 1) await sides[(round + index) % sides.length]?.();
        }
        const storeRun = meanRun(storeRuns);
        const rawRun = meanRun(rawRuns);
        const untracedRun = meanRun(untracedRuns);
        const ratio = storeRun.perSecond / rawRun.perSecond;
        const ratioUntraced = storeRun.perSecond / untracedRun.perSecond;
        const mean = (values: number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;
        const storeCpuMicros = mean(storeCpu);
        const rawCpuMicros = mean(rawCpu);
        const rawUntracedCpuMicros = mean(untracedCpu);
        report.cases.push({ mode, callers, store: storeRun, raw: rawRun, rawUntraced: untracedRun, ratio, ratioUntraced, storeCpuMicros, rawCpuMicros, rawUntracedCpuMicros, retryable: { ...retryable } });
        log(`${formatRun(`${mode}, ${callers} callers, store`, storeRun)}   ${storeCpuMicros.toFixed(0).padStart(4)} us Node CPU/request`);
        log(`${formatRun(`${mode}, ${callers} callers, raw mysql2`, rawRun)}   ${rawCpuMicros.toFixed(0).padStart(4)} us Node CPU/request`);
        log(`${formatRun(`${mode}, ${callers} callers, raw, trace off`, untracedRun)}   ${rawUntracedCpuMicros.toFixed(0).padStart(4)} us Node CPU/request`);
        log(`  store / raw: ${ratio.toFixed(2)}x (target >= 0.85x); store / raw with trace off: ${ratioUntraced.toFixed(2)}x`);
        if (retryable.store + retryable.raw + retryable.rawUntraced > 0) {
          log(`  answered 503 (a deadlock's rollback; a client retries): store ${retryable.store}, raw ${retryable.raw}, raw with trace off ${retryable.rawUntraced}`);
        }
      }
    }
    await Promise.all([...rawConnections, ...untracedConnections].map((connection) => connection.end()));
    return report;
  } finally {
    await server.stop();
  }
}
