// Fault 6: two instances with clocks an hour apart (libfaketime: instance b runs an hour
// ahead). Every time the store decides by (expiry, lease) comes from the database's clock, so
// they must agree: half the first attempts race on both instances at once; no key may be
// taken over while its lease runs (attempts stay 1: nothing fails in this fault), and every
// key's expiry is its creation plus the policy's retention, both on the database's clock.
import type { Fault } from './harness';
import { underLoad } from './harness';

const OFFSET = '+1h';

export const clockSkew: Fault = {
  number: 6,
  name: 'clock skew (instance b an hour ahead)',
  skip: (harness) => (harness.cluster.caps.faketime ? null : 'libfaketime is not installed (apt-get install faketime)'),
  run: async (harness) => {
    const skewed = harness.instances[1];
    if (!skewed) throw new Error('two instances are needed');
    skewed.offset = OFFSET;
    await skewed.stop();
    await skewed.start();
    const probe = await fetch(`${skewed.baseUrl}/api/health`);
    const skew = (Date.parse(probe.headers.get('date') ?? '') - Date.now()) / 60_000;
    const { rows: before } = await harness.db.query<{ now: Date }>('SELECT now()');
    const result = await underLoad(harness, '6. clock skew (1 h)', 'f6', () => Promise.resolve({ faultEnd: Date.now() }), {
      warmupMs: 0,
      afterMs: 12_000,
      load: { raceShare: 0.5, refundShare: 0.5 },
    });
    result.notes.push(`instance b's clock reads ${skew.toFixed(0)} min ahead (its Date header)`);
    if (Math.abs(skew - 60) > 2) result.failures.push(`instance b's clock is not an hour ahead (${skew.toFixed(1)} min): libfaketime did not take`);
    const { rows } = await harness.db.query<{ keys: string; taken_over: string; wrong_expiry: string; out_of_window: string }>(
      `SELECT count(*) AS keys,
              count(*) FILTER (WHERE k.attempts > 1) AS taken_over,
              count(*) FILTER (WHERE k.expires_at <> k.created_at + p.retention_seconds * interval '1 second') AS wrong_expiry,
              count(*) FILTER (WHERE k.created_at NOT BETWEEN $1 AND now()) AS out_of_window
         FROM idempotency_keys k
         JOIN endpoint_policies p ON p.service = k.service AND p.endpoint = k.scope
        WHERE k.key LIKE 'f6-%'`,
      [before[0]?.now],
    );
    const row = rows[0];
    if (row) {
      result.notes.push(`${row.keys} keys: ${row.taken_over} taken over, ${row.wrong_expiry} with an expiry other than created + retention, ${row.out_of_window} created outside the run's window (database clock)`);
      if (Number(row.keys) === 0) result.failures.push('no key of this fault was found with its policy');
      if (Number(row.taken_over) > 0) result.failures.push(`${row.taken_over} key(s) were taken over while nothing failed: a lease judged on a skewed clock`);
      if (Number(row.wrong_expiry) > 0) result.failures.push(`${row.wrong_expiry} key(s) expire at another time than created + retention`);
      if (Number(row.out_of_window) > 0) result.failures.push(`${row.out_of_window} key(s) carry a creation time outside the run (an application clock)`);
    }
    // Flow buckets are minutes of the instance's own clock (the recorder stamps them in memory).
    const { rows: future } = await harness.db.query<{ count: string }>(
      `SELECT coalesce(sum(count), 0) AS count FROM flow_counts_minute WHERE service = 'demo' AND minute > now() + interval '30 minutes'`,
    );
    result.notes.push(`${future[0]?.count ?? 0} flow count(s) filed under minutes an hour ahead: the recorder stamps buckets with the instance's clock (a dashboard finding, not a store one)`);
    return result;
  },
  restore: async (harness) => {
    const skewed = harness.instances[1];
    if (!skewed) return;
    skewed.offset = undefined;
    await skewed.stop();
  },
};
