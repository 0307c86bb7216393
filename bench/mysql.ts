// `npm run bench -- mysql`: the whole request through the MySQL/MariaDB backend
// (IdempotencyStore.execute with MysqlBackend: fingerprint, claim, trivial work, sealing,
// completion) beside the same statements issued raw with mysql2 in the same run, one connection
// per caller, new keys, in both modes, at 8 and 32 callers (BENCH_MYSQL_CALLERS), on a MariaDB
// server of its own (test/helpers/mariadb-server.ts). Alternating rounds, so both sides see the
// same machine. Raw, per request:
//   claim-first   INSERT (claim), UPDATE (completion)                              two commits
//   transactional SELECT (no committed row), START TRANSACTION, INSERT, UPDATE, COMMIT
// The store's flow recorder and quota (Postgres) are not in this figure. Target: store / raw >= 0.85x.
import { randomBytes, randomUUID } from 'node:crypto';
import mysql from 'mysql2/promise';
import { IdempotencyStore, ResponseKeyRing, newCorrelationId, type ExecutionMode, type IdempotentCall } from '@retrysafe/store';
import { MysqlBackend, mysqlStatementTexts, type MysqlQueryable } from '@retrysafe/store/mysql';
import { startMariaDb } from '../test/helpers/mariadb-server';
import { BENCH_ENDPOINT, BENCH_SERVICE, benchBody, benchPolicy, benchResponse } from './fixtures';
import { formatRun, meanRun, runClosedLoop, type RunResult } from './measure';

const CALLERS = (process.env.BENCH_MYSQL_CALLERS ?? '8,32').split(',').map(Number);
const DURATION_MS = Number(process.env.BENCH_SECONDS ?? 3) * 1000;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const MODES: ExecutionMode[] = ['claim-first', 'transactional'];

export interface MysqlBenchCase {
  mode: ExecutionMode;
  callers: number;
  store: RunResult;
  raw: RunResult;
  ratio: number;
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
    const rawRequest = (mode: ExecutionMode) => async (worker: number) => {
      const connection = rawConnections[worker];
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
        const storeRuns: RunResult[] = [];
        const rawRuns: RunResult[] = [];
        for (let round = 0; round < ROUNDS; round += 1) {
          rawRuns.push(await runClosedLoop(callers, DURATION_MS / ROUNDS, rawRequest(mode)));
          storeRuns.push(await runClosedLoop(callers, DURATION_MS / ROUNDS, storeRequest(mode)));
        }
        const storeRun = meanRun(storeRuns);
        const rawRun = meanRun(rawRuns);
        const ratio = storeRun.perSecond / rawRun.perSecond;
        report.cases.push({ mode, callers, store: storeRun, raw: rawRun, ratio });
        log(formatRun(`${mode}, ${callers} callers, store`, storeRun));
        log(formatRun(`${mode}, ${callers} callers, raw mysql2`, rawRun));
        log(`  store / raw: ${ratio.toFixed(2)}x (target >= 0.85x)`);
      }
    }
    await Promise.all(rawConnections.map((connection) => connection.end()));
    return report;
  } finally {
    await server.stop();
  }
}
