// `npm run bench`: every benchmark, each printing its figures and the ratio to its
// baseline, against a throw-away embedded Postgres (or BENCH_DATABASE_URL).
// Results are also written to artifacts/bench/results.json.
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { cpus } from 'node:os';
import { benchClaims } from './claims';
import { benchLifecycle } from './lifecycle';
import { benchHttp } from './http';
import { openBenchDatabase, type BenchDatabase } from './database';
import { benchPartitions } from './partitions';
import { benchPartitionProbes } from './partition-probes';
import { benchStatsQueries } from './stats-queries';
import { benchSweeper } from './sweeper';
import { benchSignIn } from './sign-in-load';
import { benchRecorder } from './recorder';
import { benchTrace } from './trace';
import { benchCorrelation } from './correlation';
import { benchDashboard } from './dashboard';
import { chooseBenches } from './names';
import { benchMysql } from './mysql';
import { benchRedis } from './redis';
import { benchRedisCluster } from './redis-cluster';
import { hasRedis } from '../packages/store/test/helpers/redis';
import { benchScale } from './scale';
import { benchCleanup } from './cleanup';

const log = (line: string) => process.stdout.write(`${line}\n`);

/** `npm run bench -- sweeper` runs only the named benchmarks; an unknown name fails before any database starts. */
const choice = chooseBenches(process.argv.slice(2));
if (!choice.ok) {
  process.stderr.write(`bench: ${choice.message}\n`);
  process.exit(2);
}
const { wanted } = choice;

async function main(): Promise<void> {
  // The scale bench runs for hours on a Postgres of its own (in a memory cgroup): only when named.
  if (wanted('scale')) {
    log('\n== Scale: the key store up to BENCH_SCALE_ROWS keys in a memory-bound Postgres, both layouts ==');
    await benchScale(log);
  }
  // The cleanup bench runs on a primary and a streaming standby of its own: only when named.
  if (wanted('cleanup')) {
    log('\n== Cleanup: steady state at a fixed rate, and expired keys removed by the sweeper, a partition drop and one unbounded DELETE, beside a streaming replica ==');
    await benchCleanup(log);
  }
  if (process.argv.slice(2).every((name) => name === 'scale' || name === 'cleanup')) return;
  const database = await openBenchDatabase();
  log(`PostgreSQL ${database.serverVersion}, ${cpus().length} CPU(s), Node ${process.version}`);
  try {
    let claims, lifecycle, http, signIn, sweeper, partitions, partitionProbes, statsQueries, recorder, trace, correlation, dashboard, mysql, redis, redisCluster;
    if (wanted('lifecycle')) {
      log('\n== Lifecycle: store.execute, claim to completion, against the same statements issued raw ==');
      lifecycle = await benchLifecycle(database.adminUrl, log);
    }
    if (wanted('http')) {
      log('\n== HTTP: the demo payments API end to end, beside a no-op route of the same server ==');
      http = await benchHttp(database.adminUrl, log);
    }
    if (wanted('sign-in')) {
      log('\n== Sign-in load: payment p50 idle and under 12 concurrent bogus sign-ins ==');
      signIn = await benchSignIn(database.adminUrl, log);
    }
    if (wanted('dashboard')) {
      log('\n== Dashboard: navigation to the overview\'s first drawn chart line in Chromium, per range ==');
      dashboard = await benchDashboard(database.adminUrl, log);
    }
    if (wanted('mysql')) {
      log('\n== MySQL/MariaDB: store.execute through MysqlBackend, against the same statements issued raw with mysql2 ==');
      mysql = await benchMysql(log);
    }
    if (wanted('claims')) {
      log('\n== Claims: the store against the raw INSERT ... ON CONFLICT ==');
      claims = await benchClaims(database, log);
    }
    if (wanted('redis')) {
      log('\n== Redis: the store with key records in Redis (claim-first, fingerprints, sealing, metrics on) beside its Lua scripts sent raw, Powertools idempotency and node-idempotency ==');
      if (hasRedis) redis = await benchRedis(database, log);
      else log('SKIPPED: no redis-server (apt-get install redis-server, or set REDIS_SERVER_PATH)');
    }
    if (wanted('redis-cluster')) {
      log('\n== Redis Cluster: the store on 3 masters with a replica each, without WAIT and with waitReplicas: 1 ==');
      if (hasRedis) redisCluster = await benchRedisCluster(database, log);
      else log('SKIPPED: no redis-server (apt-get install redis-server, or set REDIS_SERVER_PATH)');
    }
    if (wanted('sweeper')) {
      log('\n== Sweeper: expiry under live claim traffic ==');
      sweeper = await benchSweeper(database, log);
    }
    if (wanted('recorder')) {
      log("\n== Recorder: the flow recorder's CPU per claim, with and without the principals' top-K ==");
      recorder = await benchRecorder(database, log);
      log("\n== Recorder: the attempt trace's cost, the whole request traced against untraced, same run ==");
      trace = await benchTrace(database, log);
    }
    /** Runs a bench on a database of its own beside the shared one (a large store, or the partitioned layout), dropped after. */
    const onOwnDatabase = async <T>(layout: 'plain' | 'partitioned', bench: (own: BenchDatabase) => Promise<T>): Promise<T> => {
      const own = await openBenchDatabase({ layout, adminUrl: database.adminUrl });
      try {
        return await bench(own);
      } finally {
        await own.close();
      }
    };
    if (wanted('correlation')) {
      log('\n== Correlation-id lookup: its time on a large store and what its index costs claims ==');
      correlation = await onOwnDatabase('plain', (big) => benchCorrelation(big, log));
    }
    if (wanted('stats')) {
      log('\n== Monitoring queries on a 10-million-row store ==');
      statsQueries = await onOwnDatabase('plain', (big) => benchStatsQueries(big, log));
    }
    if (wanted('partitions')) {
      log('\n== Partitioned layout: dropping a day partition under live claims ==');
      partitions = await onOwnDatabase('partitioned', (partitioned) => benchPartitions(partitioned, log));
    }
    if (wanted('partition-probes')) {
      log('\n== Partitioned layout: what each live partition costs a claim (its probe before the insert) ==');
      partitionProbes = await onOwnDatabase('partitioned', (partitioned) => benchPartitionProbes(partitioned, log));
    }
    await mkdir(join('artifacts', 'bench'), { recursive: true });
    await writeFile(join('artifacts', 'bench', 'results.json'), JSON.stringify({ at: new Date().toISOString(), lifecycle, http, signIn, claims, sweeper, partitions, partitionProbes, statsQueries, recorder, trace, correlation, dashboard, mysql, redis, redisCluster }, null, 2));
  } finally {
    await database.close();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
