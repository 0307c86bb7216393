// Fault 8: the instances' store behind a PgBouncer in transaction mode (DATABASE_POOLER =
// transaction, DATABASE_DIRECT_URL the database itself), which is killed and restarted under
// the callers' load, then PAUSEd for two seconds and RESUMEd. Judged as every fault is: no
// duplicate effect, no 500, every 503 with Retry-After, every key settled. A completion the
// pooler failed after the work ran is retried within the lease (the store's
// completionRetries); one that could not be recorded is reported, and shows as a takeover.
import { setTimeout as sleep } from 'node:timers/promises';
import { hasPgBouncer, startPgBouncer, type PgBouncer } from '../packages/store/test/helpers/pgbouncer';
import { setPooledSearchPath } from '../db/topology';
import { underLoad, type Fault, type Harness } from './harness';

let pgbouncer: PgBouncer | undefined;

async function throughPooler(harness: Harness, pooler: PgBouncer): Promise<void> {
  // What npm start does before anything connects through a pooler (db/prepare.ts): the server's
  // search_path becomes the login's own in this database, since no startup option passes the
  // pooler. The instances run the server directly (scripts/serve.ts), so the fault does it here.
  await setPooledSearchPath(harness.cluster.url, []);
  for (const instance of harness.instances) {
    instance.overrides = { DATABASE_URL: pooler.url(), DATABASE_POOLER: 'transaction', DATABASE_DIRECT_URL: harness.cluster.url };
  }
  await Promise.all(harness.instances.map((instance) => instance.stop()));
  await Promise.all(harness.instances.map((instance) => instance.start()));
}

export const poolerFault: Fault = {
  number: 8,
  name: 'PgBouncer (transaction mode) restarted, then paused',
  skip: () => (hasPgBouncer ? null : 'pgbouncer is not installed (apt-get install pgbouncer)'),
  run: async (harness) => {
    const pooler = await startPgBouncer({ upstreamUrl: harness.cluster.url, poolSize: 20 });
    pgbouncer = pooler;
    await throughPooler(harness, pooler);
    harness.say(`  instances through PgBouncer at ${pooler.url().replace(/\/\/[^@]*@/, '//')}`);
    const result = await underLoad(harness, '8. PgBouncer restarted, paused', 'f8', async () => {
      const began = Date.now();
      await pooler.restart();
      harness.say(`  PgBouncer killed and restarted in ${Date.now() - began} ms`);
      await sleep(3_000);
      const pausedAt = Date.now();
      await pooler.pause();
      harness.say(`  PgBouncer paused (every server connection released) ${Date.now() - pausedAt} ms after PAUSE`);
      await sleep(2_000);
      await pooler.resume();
      const faultEnd = Date.now();
      harness.say(`  PgBouncer resumed after ${faultEnd - pausedAt} ms`);
      return { faultEnd };
    });
    const { rows } = await harness.db.query<{ taken: string }>(
      `SELECT count(*) AS taken FROM idempotency_keys WHERE key LIKE 'f8-%' AND attempts > 1 AND state = 'completed'`,
    );
    result.notes.push(`${rows[0]?.taken ?? 0} key(s) completed on a second attempt (a takeover after the lease, or a retry after a 5xx)`);
    return result;
  },
  restore: async (harness) => {
    await pgbouncer?.resume().catch(() => undefined);
    for (const instance of harness.instances) instance.overrides = {};
    await Promise.all(harness.instances.map((instance) => instance.stop()));
    await pgbouncer?.stop();
    pgbouncer = undefined;
  },
};
