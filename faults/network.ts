// Fault 3: a bad network between the app and Postgres, on the veth pair into the database's
// namespace: delay, then 10% loss, then a full partition for 10 s. netem is used when the
// kernel has it; without it (this machine's kernel has no sch_netem) delay comes from a
// token-bucket rate limit (tbf) whose queue holds packets back, and loss from iptables'
// statistic match. The partition drops every packet both ways (iptables), so connections
// stall rather than fail fast, as a real partition does.
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import { CHAIN, DB_LINK, HOST_LINK, NAMESPACE } from './cluster';
import { underLoad, type Fault, type Harness } from './harness';
import type { KeyRecord } from './load';
import { must, run } from './shell';


function inNamespace(command: string, args: string[]): [string, string[]] {
  return ['ip', ['netns', 'exec', NAMESPACE, command, ...args]];
}

async function both(host: [string, string[]], db: [string, string[]]): Promise<void> {
  await must(...host);
  await must(...db);
}

async function setDelay(netem: boolean): Promise<string> {
  if (netem) {
    await both(['tc', ['qdisc', 'add', 'dev', HOST_LINK, 'root', 'netem', 'delay', '100ms']], inNamespace('tc', ['qdisc', 'add', 'dev', DB_LINK, 'root', 'netem', 'delay', '100ms']));
    return 'netem delay 100 ms each way';
  }
  const tbf = ['root', 'tbf', 'rate', '384kbit', 'burst', '4kb', 'latency', '300ms'];
  await both(['tc', ['qdisc', 'add', 'dev', HOST_LINK, ...tbf]], inNamespace('tc', ['qdisc', 'add', 'dev', DB_LINK, ...tbf]));
  return 'tbf 384 kbit/s each way, queue up to 300 ms (no netem)';
}

async function clearQdiscs(): Promise<void> {
  await run('tc', ['qdisc', 'del', 'dev', HOST_LINK, 'root']);
  await run(...inNamespace('tc', ['qdisc', 'del', 'dev', DB_LINK, 'root']));
}

async function setDrop(probability: number | null): Promise<void> {
  const match = probability === null ? [] : ['-m', 'statistic', '--mode', 'random', '--probability', String(probability)];
  await run('iptables', ['-N', CHAIN]);
  await run('iptables', ['-C', 'OUTPUT', '-j', CHAIN]).then(async (checked) => {
    if (checked.code !== 0) await must('iptables', ['-I', 'OUTPUT', '-j', CHAIN]);
  });
  await must('iptables', ['-A', CHAIN, '-o', HOST_LINK, ...match, '-j', 'DROP']);
  await must(...inNamespace('iptables', ['-A', 'OUTPUT', '-o', DB_LINK, ...match, '-j', 'DROP']));
}

async function clearDrops(): Promise<void> {
  await run('iptables', ['-F', CHAIN]);
  await run(...inNamespace('iptables', ['-F', 'OUTPUT']));
}

/** Round trips of SELECT 1 from the suite's own pool while a phase lasts (its measured delay). */
async function measure(db: pg.Pool, ms: number): Promise<string> {
  const samples: number[] = [];
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const started = performance.now();
    const ok = await db.query('SELECT 1').then(
      () => true,
      () => false,
    );
    if (ok) samples.push(performance.now() - started);
    await sleep(200);
  }
  samples.sort((a, b) => a - b);
  const median = samples[Math.floor(samples.length / 2)];
  return median === undefined ? 'no round trip completed' : `median SELECT 1 round trip ${median.toFixed(0)} ms`;
}

export const networkFaults: Fault = {
  number: 3,
  name: 'bad network (delay, 10% loss, 10 s partition)',
  skip: (harness: Harness) => {
    if (!harness.cluster.caps.namespace) return 'no network namespace and veth pair could be made here (needs root and iproute2)';
    if (!harness.cluster.caps.iptables) return 'iptables is missing (loss and the partition are made with it): apt-get install iptables';
    return null;
  },
  run: async (harness) => {
    const notes: string[] = [];
    const partition = { from: 0, to: 0 };
    let seen = new Map<string, KeyRecord>();
    const result = await underLoad(
      harness,
      '3. bad network',
      'f3',
      async (records) => {
        seen = records;
        notes.push(`delay: ${await setDelay(harness.cluster.caps.netem)}, ${await measure(harness.db, 6_000)}`);
        await clearQdiscs();
        await setDrop(0.1);
        notes.push(`loss: 10% of packets dropped each way (iptables statistic), ${await measure(harness.db, 6_000)}`);
        await clearDrops();
        await setDrop(null);
        harness.say('  partitioned for 10 s');
        partition.from = Date.now();
        await sleep(10_000);
        partition.to = Date.now();
        await clearDrops();
        return { faultEnd: Date.now() };
      },
      { afterMs: 8_000 },
    );
    result.notes.push(...notes);
    // The server must give up on an unreachable database by itself, while the partition lasts:
    // requests sent into it are answered 503 before it ends, not when the network comes back.
    let answeredWhilePartitioned = 0;
    for (const record of seen.values()) {
      for (const a of record.attempts) if (a.status === 503 && a.sentAt >= partition.from && a.answeredAt < partition.to) answeredWhilePartitioned++;
    }
    result.notes.push(`${answeredWhilePartitioned} request(s) sent into the partition answered 503 before it ended`);
    if (answeredWhilePartitioned === 0) result.failures.push('no request sent into the partition was answered before it ended: requests wait on the network');
    if (!harness.cluster.caps.netem) result.notes.push('netem is not in this kernel: delay made with tbf instead');
    return result;
  },
  restore: async () => {
    await clearQdiscs();
    await clearDrops();
  },
};
