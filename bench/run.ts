// `npm run bench`: every benchmark, each printing its figures and the ratio to its
// baseline, against a throw-away embedded Postgres (or BENCH_DATABASE_URL).
// Results are also written to artifacts/bench/results.json.
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { cpus } from 'node:os';
import { benchClaims } from './claims';
import { openBenchDatabase } from './database';

const log = (line: string) => process.stdout.write(`${line}\n`);

async function main(): Promise<void> {
  const database = await openBenchDatabase();
  log(`PostgreSQL ${database.serverVersion}, ${cpus().length} CPU(s), Node ${process.version}`);
  try {
    log('\n== Claims: the store against the raw INSERT ... ON CONFLICT ==');
    const claims = await benchClaims(database, log);
    await mkdir(join('artifacts', 'bench'), { recursive: true });
    await writeFile(join('artifacts', 'bench', 'results.json'), JSON.stringify({ at: new Date().toISOString(), claims }, null, 2));
  } finally {
    await database.close();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
