// Fault 9: one principal floods new keys past its live-key quota, on both instances at once.
// An admin sets the payments endpoint's quota to 30; a fresh tenant then sends 100 concurrent
// payments with distinct keys to one instance (exactly 30 made), and another fresh tenant the
// same, alternating between the instances (a 503, a pool waited out, is retried, as the
// callers do). Judged: no 500, every 503 and 429 with Retry-After, at most
// N x quota keys made over N instances (the bound docs/compliance.md states), both instances refusing once their counts have been flushed and read back, every
// key made answered again as a byte-identical replay, and one payment per key made.
import { setTimeout as sleep } from 'node:timers/promises';
import { DEMO_SERVICE, PAYMENTS_ENDPOINT } from '../server/demo/policies';
import { createTenant } from '../server/demo/tenants';
import { changePolicy, fieldsOf, getPolicy } from '../server/retention/policies';
import { emptyResult, type FaultResult } from './checks';
import type { Fault, Harness } from './harness';
import type { Instance } from './instances';

const QUOTA = 30;
const FLOOD = 100;
/** Two quota flush intervals (1 s each) and slack: every instance has the others' counts by then. */
const FLUSHED_MS = 3_000;

interface Answer {
  status: number;
  retryAfter: string | null;
  replayed: boolean;
  body: Buffer;
}

/** Every answer a flood request got, its last one first: a 503 (a pool waited out, with Retry-After) is retried, as the callers do. */
async function flood(instance: Instance, apiKey: string, key: string): Promise<Answer[]> {
  const answers: Answer[] = [];
  for (let attempt = 0; attempt < 10; attempt++) {
    const answer = await pay(instance, apiKey, key);
    answers.unshift(answer);
    if (answer.status !== 503 && answer.status !== 0) break;
    await sleep(Number(answer.retryAfter ?? 1) * 1000);
  }
  return answers;
}

/** Counts the 5xx of these attempts in the result; a 500, or a 503 without Retry-After, fails it. */
function judge5xx(result: FaultResult, attempts: readonly Answer[]): void {
  for (const answer of attempts) {
    if (answer.status >= 500) result.statuses5xx[String(answer.status)] = (result.statuses5xx[String(answer.status)] ?? 0) + 1;
    if (answer.status === 500) result.status500++;
    if (answer.status === 503 && !(Number(answer.retryAfter) >= 1)) result.without503RetryAfter++;
  }
}

async function pay(instance: Instance, apiKey: string, key: string): Promise<Answer> {
  try {
    const response = await fetch(`${instance.baseUrl}/api/v1/payments`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'idempotency-key': key, 'content-type': 'application/json' },
      body: JSON.stringify({ amount: 100, currency: 'EUR', description: key }),
      signal: AbortSignal.timeout(30_000),
    });
    return { status: response.status, retryAfter: response.headers.get('retry-after'), replayed: response.headers.get('idempotent-replayed') === 'true', body: Buffer.from(await response.arrayBuffer()) };
  } catch {
    return { status: 0, retryAfter: null, replayed: false, body: Buffer.alloc(0) };
  }
}

async function setQuota(harness: Harness, liveKeyQuota: number, reason: string): Promise<void> {
  const current = await getPolicy(harness.db, DEMO_SERVICE, PAYMENTS_ENDPOINT);
  if (!current) throw new Error(`no policy for ${PAYMENTS_ENDPOINT}`);
  if (current.liveKeyQuota === liveKeyQuota) return;
  await changePolicy(harness.db, { service: DEMO_SERVICE, endpoint: PAYMENTS_ENDPOINT, fields: { ...fieldsOf(current), liveKeyQuota }, actor: 'faults-suite', reason, expectedVersion: current.version });
}

let restoreQuota: number | null = null;

export const quotaFlood: Fault = {
  number: 9,
  name: `quota flood (${FLOOD} concurrent new keys, quota ${QUOTA}, two instances)`,
  run: async (harness) => {
    const result = emptyResult(`9. quota flood (${FLOOD} new keys, quota ${QUOTA})`);
    const { instances } = harness;
    const before = await getPolicy(harness.db, DEMO_SERVICE, PAYMENTS_ENDPOINT);
    restoreQuota = before?.liveKeyQuota ?? null;
    await setQuota(harness, QUOTA, 'faults suite: quota flood');
    // Each instance reads policies every few seconds: a probe tenant per instance finds when the quota is in force there.
    for (const instance of instances) {
      const probe = await createTenant(harness.db, `quota probe ${instance.name}`);
      for (let n = 0; ; n++) {
        const answer = await pay(instance, probe.apiKey, `f9-probe-${n}`);
        result.requests++;
        if (answer.status === 429) break;
        if (answer.status !== 201 || n > 400) throw new Error(`instance ${instance.name} answered ${answer.status} to probe ${n} before enforcing the quota`);
        await sleep(50);
      }
    }

    // One instance alone: exact. A fresh principal's 100 concurrent new keys to instance a make exactly the quota.
    const single = await createTenant(harness.db, 'quota flooder, one instance');
    const first = instances[0] as Instance;
    const aloneAttempts = await Promise.all(Array.from({ length: FLOOD }, (_, i) => flood(first, single.apiKey, `f9-one-${i}`)));
    const alone = aloneAttempts.map((attempts) => attempts[0] as Answer);
    for (const attempts of aloneAttempts) {
      result.requests += attempts.length;
      judge5xx(result, attempts);
    }
    const madeAlone = alone.filter((answer) => answer.status === 201).length;
    result.notes.push(`one instance: ${madeAlone} of ${FLOOD} new keys made under a quota of ${QUOTA} (exact: ${QUOTA})`);
    if (madeAlone !== QUOTA) result.failures.push(`${madeAlone} keys made on one instance under a quota of ${QUOTA}`);
    for (const answer of alone) {
      if (answer.status !== 201 && !(answer.status === 429 && Number(answer.retryAfter) >= 1)) result.failures.push(`one instance answered ${answer.status} (201, or 429 with Retry-After, expected)`);
    }

    // Both instances: at most N x quota.
    const flooder = await createTenant(harness.db, 'quota flooder');
    const keys = Array.from({ length: FLOOD }, (_, i) => `f9-${i}`);
    const on = (i: number): Instance => instances[i % instances.length] as Instance;
    const attemptsOf = await Promise.all(keys.map((key, i) => flood(on(i), flooder.apiKey, key)));
    const answers = attemptsOf.map((attempts) => attempts[0] as Answer);
    for (const attempts of attemptsOf) {
      result.requests += attempts.length;
      judge5xx(result, attempts);
    }
    result.keys = keys.length;
    result.finalAnswers = answers.filter((answer) => answer.status === 201 || answer.status === 429).length;
    const made = keys.filter((_, i) => answers[i]?.status === 201);
    for (const answer of answers) {
      if (answer.status !== 201 && answer.status !== 429) result.unanswered++;
      if (answer.status === 429 && !(Number(answer.retryAfter) >= 1)) result.failures.push('a 429 without Retry-After');
    }
    const bound = instances.length * QUOTA;
    result.notes.push(`${made.length} of ${FLOOD} new keys made under a quota of ${QUOTA} on ${instances.length} instances (bound N x quota = ${bound}); ${answers.filter((a) => a.status === 429).length} answered 429`);
    if (made.length > bound) result.failures.push(`${made.length} keys made, over the bound of ${bound}`);
    if (made.length < QUOTA) result.failures.push(`only ${made.length} keys made under a quota of ${QUOTA}`);
    if (result.unanswered > 0) result.failures.push(`${result.unanswered} key(s) without a final answer (201 or 429) after 10 attempts`);

    // Once the counts have been flushed and read back, no instance makes another key for this principal.
    await sleep(FLUSHED_MS);
    for (const instance of instances) {
      const afterAttempts = await flood(instance, flooder.apiKey, `f9-after-${instance.name}`);
      const after = afterAttempts[0] as Answer;
      result.requests += afterAttempts.length;
      judge5xx(result, afterAttempts);
      if (after.status !== 429) result.failures.push(`instance ${instance.name} answered ${after.status} to a new key after the flush (429 expected)`);
    }
    // Every key made replays, byte for byte, on the other instance.
    const replayAttempts = await Promise.all(made.map((key) => flood(on(keys.indexOf(key) + 1), flooder.apiKey, key)));
    const replays = replayAttempts.map((attempts) => attempts[0]);
    for (const attempts of replayAttempts) {
      result.requests += attempts.length;
      judge5xx(result, attempts);
    }
    made.forEach((key, i) => {
      const replay = replays[i];
      const first = answers[keys.indexOf(key)];
      if (!replay || !first || replay.status !== 201 || !replay.replayed || !replay.body.equals(first.body)) result.replayMismatches++;
    });
    if (result.replayMismatches > 0) result.failures.push(`${result.replayMismatches} replay(s) differ from the first answer`);
    const { rows } = await harness.db.query<{ n: string }>('SELECT count(*) AS n FROM payments WHERE principal_id = $1', [flooder.principalId]);
    const payments = Number(rows[0]?.n ?? 0);
    if (payments > made.length) result.duplicates = payments - made.length;
    if (payments < made.length) result.lost = made.length - payments;
    if (payments !== made.length) result.failures.push(`${payments} payment(s) for ${made.length} key(s) made`);
    if (result.status500 > 0) result.failures.push(`${result.status500} answer(s) were 500`);
    if (result.without503RetryAfter > 0) result.failures.push(`${result.without503RetryAfter} 503 answer(s) without Retry-After`);
    return result;
  },
  restore: async (harness) => {
    if (restoreQuota !== null) await setQuota(harness, restoreQuota, 'faults suite: quota flood over');
    restoreQuota = null;
  },
};
