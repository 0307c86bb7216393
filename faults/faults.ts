// The faults, in the order they run. Each injects its fault while the callers' load runs,
// lifts it, lets the load go on, then judges the whole window (checks.ts).
import { setTimeout as sleep } from 'node:timers/promises';
import { underLoad, type Fault } from './harness';
import { networkFaults } from './network';
import { clockSkew } from './clock';
import { diskFull } from './disk';
import { sweeperKilled } from './sweeper';
import { poolerFault } from './pooler';
import { quotaFlood } from './quota';

const restartFault = (mode: 'fast' | 'immediate', label: string): Fault => ({
  number: 1,
  name: `Postgres restart -m ${mode}`,
  run: (harness) =>
    underLoad(harness, `${label}. Postgres restart -m ${mode}`, `f${label}`, async () => {
      const began = Date.now();
      await harness.cluster.restart(mode);
      const faultEnd = Date.now();
      harness.say(`  pg_ctl restart -m ${mode} took ${faultEnd - began} ms`);
      return { faultEnd };
    }),
  restore: (harness) => harness.cluster.start().catch(() => undefined),
});

const killedInstance: Fault = {
  number: 2,
  name: 'instance SIGKILLed and restarted',
  run: (harness) => {
    const victim = harness.instances[1];
    if (!victim) throw new Error('two instances are needed');
    return underLoad(
      harness,
      '2. instance SIGKILLed, restarted',
      'f2',
      async (records) => {
        const killedAt = Date.now();
        await victim.killed();
        // One flush interval of what the victim answered is the most its recorder can lose.
        let bound = 0;
        for (const record of records.values()) {
          for (const a of record.attempts) {
            if (a.instance === victim.name && a.answeredAt >= killedAt - (Number(harness.env.METRICS_FLUSH_SECONDS) * 1000 + 500) && ((a.status >= 200 && a.status < 300) || a.status === 409 || a.status === 422)) bound++;
          }
        }
        harness.say(`  killed ${victim.name}; restarting it`);
        await sleep(1_000);
        await victim.start();
        const faultEnd = Date.now();
        harness.say(`  ${victim.name} healthy again ${faultEnd - killedAt} ms after the kill`);
        return { faultEnd, restarted: [victim.name], metricsBound: bound };
      },
      { afterMs: 8_000, load: { refundShare: 0.5 } },
    ).then(async (result) => {
      // Claim-first keys the victim held in progress: taken over (a second attempt) after their lease.
      const { rows } = await harness.db.query<{ taken: string }>(
        `SELECT count(*) AS taken FROM idempotency_keys WHERE key LIKE 'f2-%' AND attempts > 1 AND state = 'completed'`,
      );
      result.notes.push(`${rows[0]?.taken ?? 0} key(s) completed on a second attempt (takeover after the lease, or a retry after a failure)`);
      return result;
    });
  },
  restore: async (harness) => {
    await Promise.all(harness.instances.map((instance) => instance.start()));
  },
};

const poolExhaustion: Fault = {
  number: 4,
  name: 'pool exhaustion (5x the pool)',
  run: async (harness) => {
    // Each instance's app pool holds 10 connections and a refund holds one through its
    // (here 1 s) processor call: 100 callers over two instances ask for 5x what the pools hold.
    for (const instance of harness.instances) instance.overrides = { DEMO_PROCESSOR_LATENCY_MS: '1000' };
    await Promise.all(harness.instances.map((instance) => instance.stop()));
    await Promise.all(harness.instances.map((instance) => instance.start()));
    const result = await underLoad(harness, '4. pool exhaustion (5x)', 'f4', () => Promise.resolve({ faultEnd: Date.now() }), {
      warmupMs: 0,
      afterMs: 20_000,
      load: { callers: 100, refundShare: 0.9 },
    });
    const unavailable = result.statuses5xx['503'] ?? 0;
    result.notes.push(`${unavailable} answer(s) 503 with Retry-After while the pools were exhausted; p99 of those served ${result.p99Ms ?? '-'} ms`);
    return result;
  },
  restore: async (harness) => {
    for (const instance of harness.instances) instance.overrides = {};
    await Promise.all(harness.instances.map((instance) => instance.stop()));
  },
};

export const faults: Fault[] = [restartFault('fast', '1a'), restartFault('immediate', '1b'), killedInstance, networkFaults, poolExhaustion, diskFull, clockSkew, sweeperKilled, poolerFault, quotaFlood];
