// Where the owner database is: DATABASE_URL when set, else the embedded cluster
// under .data/ (started if needed, shared with other local processes).
import { resolve } from 'node:path';
import { acquireEmbeddedPostgres } from './embedded';

export const DATA_DIR = resolve(process.cwd(), '.data');

export interface DatabaseHandle {
  url: string;
  embedded: boolean;
  /** Leaves the embedded cluster (the last process out stops it); no-op for DATABASE_URL. */
  release(): Promise<void>;
}

export async function openDatabase(databaseUrl: string | undefined, log: (line: string) => void): Promise<DatabaseHandle> {
  if (databaseUrl) return { url: databaseUrl, embedded: false, release: () => Promise.resolve() };
  const cluster = await acquireEmbeddedPostgres({ dir: DATA_DIR, log, settings: { max_connections: 300 } });
  return { url: cluster.url, embedded: true, release: () => cluster.release() };
}
