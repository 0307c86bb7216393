// Fault 5: the disk under the data folder fills up. The data folder is on a size-limited tmpfs
// of the suite's own; a filler file takes every free byte for 8 s while the load runs and a
// prober replays completed keys. New writes should answer 503 (disk full, 53100, or the
// database restarting), replays keep working where Postgres can read, and once the filler is
// removed the store goes on without a restart. Afterwards amcheck verifies the tables and
// indexes the load wrote (heap and B-tree), so "nothing corrupted" is checked, not assumed.
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { attempt, type KeyRecord } from './load';
import { underLoad, type Fault } from './harness';
import { must, run } from './shell';

const HOLD_MS = 8_000;

async function freeBytes(dir: string): Promise<number> {
  const out = await must('df', ['--output=avail', '-B1', dir]);
  return Number(out.trim().split('\n').pop());
}

export const diskFull: Fault = {
  number: 5,
  name: 'disk full',
  skip: (harness) => (harness.cluster.caps.tmpfs ? null : 'no size-limited filesystem could be mounted for the data folder (needs root and tmpfs)'),
  run: async (harness) => {
    const filler = join(harness.cluster.fsDir, 'filler');
    const window = { from: 0, to: 0 };
    const probe = { replayed: 0, failed: 0 };
    const notes: string[] = [];
    let seen = new Map<string, KeyRecord>();
    const result = await underLoad(
      harness,
      '5. disk full',
      'f5',
      async (records: Map<string, KeyRecord>) => {
        seen = records;
        const free = await freeBytes(harness.cluster.fsDir);
        // fallocate takes nearly every free block at once (Postgres writes meanwhile, so not
        // quite all), then dd writes zeros until the filesystem refuses: nothing is left.
        await must('fallocate', ['-l', String(Math.max(0, free - 16 * 1048576)), filler]);
        await run('dd', ['if=/dev/zero', `of=${filler}-rest`, 'bs=64k']);
        window.from = Date.now();
        notes.push(`filled ${Math.round(free / 1048576)} MiB; ${await freeBytes(harness.cluster.fsDir)} bytes left`);
        const tenants = new Map(harness.tenants.map((tenant) => [tenant.principalId, tenant]));
        const completed = [...records.values()].filter((record) => record.final && record.final.status >= 200 && record.final.status < 300);
        let index = 0;
        while (Date.now() - window.from < HOLD_MS) {
          const record = completed[index++ % Math.max(1, completed.length)];
          const tenant = record ? tenants.get(record.principalId) : undefined;
          const instance = harness.instances[index % harness.instances.length];
          if (!record || !tenant || !instance) {
            await sleep(100);
            continue;
          }
          const replay = await attempt(instance, tenant, record);
          record.attempts.push(replay.attempt);
          if (replay.body && replay.attempt.status >= 200 && replay.attempt.status < 300) {
            record.bodies.push(replay.body);
            probe.replayed++;
          } else probe.failed++;
          await sleep(20);
        }
        await rm(filler, { force: true });
        await rm(`${filler}-rest`, { force: true });
        window.to = Date.now();
        const postgresUp = (await run('pgrep', ['-u', 'postgres', '-f', harness.cluster.dataDir])).code === 0;
        notes.push(postgresUp ? 'Postgres kept running' : 'Postgres exited while the disk was full');
        return { faultEnd: window.to };
      },
      { afterMs: 8_000 },
    );
    result.notes.push(...notes);
    // What the callers saw while the disk was full.
    const during = { fresh: 0, unavailable: 0, other: 0 };
    for (const record of seen.values()) {
      for (const a of record.attempts) {
        if (a.sentAt < window.from || a.sentAt > window.to || a.replayed) continue;
        if (a.status >= 200 && a.status < 300) during.fresh++;
        else if (a.status === 503) during.unavailable++;
        else during.other++;
      }
    }
    result.notes.push(`while full: ${probe.replayed} replay(s) served and ${probe.failed} not; ${during.fresh} new request(s) succeeded, ${during.unavailable} answered 503, ${during.other} otherwise`);
    // amcheck: heap and every B-tree index of the tables the load wrote.
    await harness.db.query('CREATE EXTENSION IF NOT EXISTS amcheck');
    const { rows } = await harness.db.query<{ relation: string; problems: string }>(
      `SELECT c.relname AS relation, (SELECT count(*) FROM verify_heapam(c.oid))::text AS problems
         FROM pg_class c WHERE c.relname IN ('idempotency_keys', 'payments', 'refunds') AND c.relkind = 'r'`,
    );
    const damaged = rows.filter((row) => row.problems !== '0');
    const { rows: indexes } = await harness.db.query<{ name: string }>(
      `SELECT i.indexrelid::regclass::text AS name FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
        WHERE t.relname IN ('idempotency_keys', 'payments', 'refunds') AND am.amname = 'btree'`,
    );
    for (const index of indexes) {
      await harness.db.query('SELECT bt_index_check($1::regclass, true)', [index.name]).catch((error: unknown) => {
        damaged.push({ relation: index.name, problems: error instanceof Error ? error.message : String(error) });
      });
    }
    result.notes.push(`amcheck: ${rows.length} tables and ${indexes.length} B-tree indexes checked, ${damaged.length} damaged`);
    for (const damage of damaged) result.failures.push(`amcheck: ${damage.relation}: ${damage.problems}`);
    return result;
  },
  restore: async (harness) => {
    await rm(join(harness.cluster.fsDir, 'filler'), { force: true });
    await rm(join(harness.cluster.fsDir, 'filler-rest'), { force: true });
    await harness.cluster.start().catch(() => undefined);
  },
};
