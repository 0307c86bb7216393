// A cross-process mutex for the few start-up steps that two local processes
// (npm start, the CLI, parallel test workers) must not do at once: initialising
// or starting the embedded cluster, and building the app. proper-lockfile keeps
// the lock fresh while held and treats one left by a crashed process as stale.
import { mkdir } from 'node:fs/promises';
import { dirname } from 'node:path';
import lockfile from 'proper-lockfile';

/** Runs `fn` while holding the lock named by `path` (created as `path.lock`). */
export async function withFileLock<T>(path: string, fn: () => Promise<T>, timeoutMs = 300_000): Promise<T> {
  await mkdir(dirname(path), { recursive: true });
  const release = await lockfile.lock(path, {
    realpath: false,
    stale: 10_000,
    update: 2_000,
    retries: { retries: Math.ceil(timeoutMs / 250), factor: 1, minTimeout: 250, maxTimeout: 250 },
  });
  try {
    return await fn();
  } finally {
    await release();
  }
}
