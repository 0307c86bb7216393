// `npm run bench`: every benchmark, each printing its figures and the ratio to its
// baseline, against a throw-away embedded Postgres (or BENCH_DATABASE_URL).
// Results are also written to artifacts/bench/results.json.
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { cpus } from 'node:os';
import { benchClaims } from './claims';
import { benchLifecycle } from './lifecycle';
import { benchHttp } from './http';
import { openBenchDatabase } from './database';
import { benchPartitions } from './partitions';
import { benchStatsQueries } from './stats-queries';
import { benchSweeper } from './sweeper';
import { benchSignIn } from './sign-in-load';
import { benchRecorder } from './recorder';
import { benchCorrelation } from './correlation';

const log = (line: string) => process.stdout.write(`${line}\n`);

/** `npm run bench -- sweeper` runs only the named benchmarks. */
const only = new Set(process.argv.slice(2));
const wanted = (name: string) => only.size === 0 || only.has(name);

async function main(): Promise<void> {
  const database = await openBenchDatabase();
  log(`PostgreSQL ${database.serverVersion}, ${cpus().length} CPU(s), Node ${process.version}`);
  try {
    let claims, lifecycle, http, signIn, sweeper, partitions, statsQueries, recorder, correlation;
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
    if (wanted('claims')) {
      log('\n== Claims: the store against the raw INSERT ... ON CONFLICT ==');
      claims = await benchClaims(database, log);
    }
    if (wanted('sweeper')) {
      log('\n== Sweeper: expiry under live claim traffic ==');
      sweeper = await benchSweeper(database, log);
    }
    if (wanted('recorder')) {
      log("\n== Recorder: the flow recorder's CPU per claim, with and without the principals' top-K ==");
      recorder = await benchRecorder(database, log);
    }
    if (wanted('correlation')) {
      log('\n== Correlation-id lookup: its time on a large store and what its index costs claims ==');
      const big = await openBenchDatabase({ adminUrl: database.adminUrl });
      try {
        correlation = await benchCorrelation(big, log);
      } finally {
        await big.close();
      }
    }
    if (wanted('stats')) {
      log('\n== Monitoring queries on a 10-million-row store ==');
      const big = await openBenchDatabase({ adminUrl: database.adminUrl });
      try {
        statsQueries = await benchStatsQueries(big, log);
      } finally {
        await big.close();
      }
    }
    if (wanted('partitions')) {
      log('\n== Partitioned layout: dropping a day partition under live claims ==');
      const partitioned = await openBenchDatabase({ layout: 'partitioned', adminUrl: database.adminUrl });
      try {
        partitions = await benchPartitions(partitioned, log);
      } finally {
        await partitioned.close();
      }
    }
    await mkdir(join('artifacts', 'bench'), { recursive: true });
    await writeFile(join('artifacts', 'bench', 'results.json'), JSON.stringify({ at: new Date().toISOString(), lifecycle, http, signIn, claims, sweeper, partitions, statsQueries, recorder, correlation }, null, 2));
  } finally {
    await database.close();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
