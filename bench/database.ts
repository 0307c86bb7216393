// Benchmarks run against a throw-away embedded Postgres with default durability
// (fsync on), or BENCH_DATABASE_URL (a superuser URL; a database is created in it).
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { acquireEmbeddedPostgres } from '../db/embedded';
import { migrateDatabase } from '../db/migrate';

export interface BenchDatabase {
  url: string;
  serverVersion: string;
  close(): Promise<void>;
}

export async function openBenchDatabase(options: { layout?: 'plain' | 'partitioned'; adminUrl?: string } = {}): Promise<BenchDatabase & { adminUrl: string }> {
  let adminUrl = options.adminUrl ?? process.env.BENCH_DATABASE_URL;
  let cleanup: () => Promise<void> = () => Promise.resolve();
  if (!adminUrl) {
    const dir = await mkdtemp(join(tmpdir(), 'retrysafe-bench-'));
    await chmod(dir, 0o755);
    const cluster = await acquireEmbeddedPostgres({ dir, settings: { max_connections: 200 } });
    adminUrl = cluster.url.replace(/\/[^/]*$/, '/postgres');
    cleanup = async () => {
      await cluster.release();
      await rm(dir, { recursive: true, force: true });
    };
  }
  const name = `retrysafe_bench_${Date.now().toString(36)}_${options.layout ?? 'plain'}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  // The benches' own SQL names tables as the server's queries do: look where the server's pools do (db/client.ts).
  await admin.query(`ALTER DATABASE ${name} SET search_path = retrysafe, retrysafe_demo, retrysafe_server, public`);
  const { rows } = await admin.query<{ server_version: string }>('SHOW server_version');
  await admin.end();
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  await migrateDatabase(url.toString(), { layout: options.layout ?? 'plain' });
  const admin2 = adminUrl;
  return {
    adminUrl: admin2,
    url: url.toString(),
    serverVersion: rows[0]?.server_version ?? '?',
    async close() {
      const client = new pg.Client({ connectionString: adminUrl });
      await client.connect();
      await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await client.end();
      await cleanup();
    },
  };
}
