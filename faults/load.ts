// The callers: each sends payments, and refunds of its own payments, to the two instances,
// and retries a request with the same Idempotency-Key on any 5xx, 409, 429, timeout or
// connection error until it gets a final answer (bounded in attempts and time). Every attempt
// and every 2xx body is recorded, so the checks can compare them with the database.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Instance } from './instances';

export interface Tenant {
  principalId: string;
  apiKey: string;
}

export interface Attempt {
  instance: string;
  sentAt: number;
  answeredAt: number;
  /** HTTP status, or 0 for a connection error, -1 for a timeout (no answer within the bound). */
  status: number;
  replayed: boolean;
  retryAfter: string | null;
}

export interface KeyRecord {
  key: string;
  kind: 'payment' | 'refund';
  principalId: string;
  paymentId?: string;
  amount: number;
  attempts: Attempt[];
  /** Every 2xx body, as bytes (each must equal the first). */
  bodies: Buffer[];
  final?: { status: number; body: Buffer };
}

export interface LoadOptions {
  instances: readonly Instance[];
  tenants: readonly Tenant[];
  callers: number;
  /** Prefix of every key of this fault (e.g. 'f1'), so the checks can find its effects. */
  prefix: string;
  /** Share of operations that are refunds (of the caller's own earlier payments). */
  refundShare?: number;
  /** Share of first attempts sent to two instances at once (a racing duplicate). */
  raceShare?: number;
  /** Which endpoints to call. */
  only?: 'payments' | 'refunds';
  /** An attempt with no answer within this long counts as a hang. */
  attemptTimeoutMs?: number;
  maxAttempts?: number;
  maxKeyMs?: number;
}

export interface Load {
  readonly records: Map<string, KeyRecord>;
  /** Stops starting new operations; resolves once every caller has finished its current one. */
  stop(): Promise<void>;
}

/**
 * The longest an answer may take before it counts as a hang. The server's own bound is about
 * 16 s (a pooled connection waited for, 2 s; a statement and the store's clean-up after it,
 * each bounded by the client query timeout, 5 s + 2 s); the rest is slack for a 2-core machine
 * shared with other work, where starved instances answer late without hanging.
 */
export const HANG_MS = 30_000;

export function startLoad(options: LoadOptions): Load {
  const records = new Map<string, KeyRecord>();
  const state = { running: true };
  let sequence = 0;
  const callers: Promise<void>[] = [];
  for (let index = 0; index < options.callers; index++) {
    const tenant = options.tenants[index % options.tenants.length];
    if (!tenant) throw new Error('no tenants');
    callers.push(
      (async () => {
        const payments: { id: string; amount: number }[] = [];
        let turn = 0;
        while (state.running) {
          turn++;
          const refundable = payments.length > 0 && options.only !== 'payments' && (options.only === 'refunds' || Math.random() < (options.refundShare ?? 0.3));
          const key = `${options.prefix}-${index}-${sequence++}-${Math.random().toString(36).slice(2, 8)}`;
          let record: KeyRecord;
          if (refundable) {
            const payment = payments.shift();
            if (!payment) continue;
            record = { key, kind: 'refund', principalId: tenant.principalId, paymentId: payment.id, amount: payment.amount, attempts: [], bodies: [] };
          } else if (options.only === 'refunds') {
            // Refund-only load still needs payments to refund: made quietly first.
            const made = await settleKey(options, tenant, { key, kind: 'payment', principalId: tenant.principalId, amount: 500, attempts: [], bodies: [] }, index + turn);
            if (made.final && made.final.status === 201) payments.push({ id: idOf(made.final.body), amount: 500 });
            records.set(key, made);
            continue;
          } else {
            record = { key, kind: 'payment', principalId: tenant.principalId, amount: 100 + Math.floor(Math.random() * 9_900), attempts: [], bodies: [] };
          }
          records.set(key, record);
          await settleKey(options, tenant, record, index + turn);
          if (record.kind === 'payment' && record.final?.status === 201) payments.push({ id: idOf(record.final.body), amount: record.amount });
        }
      })(),
    );
  }
  return {
    records,
    stop: async () => {
      state.running = false;
      await Promise.all(callers);
    },
  };
}

export function idOf(body: Buffer): string {
  const parsed = JSON.parse(body.toString('utf8')) as { id?: unknown };
  if (typeof parsed.id !== 'string') throw new Error('a 2xx body without an id');
  return parsed.id;
}

function requestOf(record: KeyRecord): { path: string; body: string } {
  if (record.kind === 'payment') {
    // The key is the payment's description, so the checks can count payments per key.
    return { path: '/api/v1/payments', body: JSON.stringify({ amount: record.amount, currency: 'EUR', description: record.key }) };
  }
  return { path: '/api/v1/refunds', body: JSON.stringify({ payment: record.paymentId, amount: Math.max(1, Math.floor(record.amount / 2)) }) };
}

/** One attempt to one instance. */
export async function attempt(instance: Instance, tenant: Tenant, record: KeyRecord, timeoutMs = HANG_MS): Promise<{ attempt: Attempt; body: Buffer | null }> {
  const request = requestOf(record);
  const sentAt = Date.now();
  try {
    const response = await fetch(`${instance.baseUrl}${request.path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.apiKey}`, 'idempotency-key': record.key, 'content-type': 'application/json' },
      body: request.body,
      signal: AbortSignal.timeout(timeoutMs),
    });
    const body = Buffer.from(await response.arrayBuffer());
    return {
      attempt: {
        instance: instance.name,
        sentAt,
        answeredAt: Date.now(),
        status: response.status,
        replayed: response.headers.get('idempotent-replayed') === 'true',
        retryAfter: response.headers.get('retry-after'),
      },
      body,
    };
  } catch (error) {
    const timedOut = error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError');
    return { attempt: { instance: instance.name, sentAt, answeredAt: Date.now(), status: timedOut ? -1 : 0, replayed: false, retryAfter: null }, body: null };
  }
}

function isFinal(status: number): boolean {
  return status >= 200 && status < 500 && status !== 409 && status !== 429;
}

function take(record: KeyRecord, result: { attempt: Attempt; body: Buffer | null }): void {
  record.attempts.push(result.attempt);
  const { status } = result.attempt;
  if (result.body && status >= 200 && status < 300) record.bodies.push(result.body);
  if (result.body && isFinal(status) && !record.final) record.final = { status, body: result.body };
}

function settled(record: KeyRecord): boolean {
  return record.final !== undefined;
}

/** Sends one request until it gets a final answer, or the attempt or time bound runs out. */
export async function settleKey(options: Pick<LoadOptions, 'instances' | 'raceShare' | 'attemptTimeoutMs' | 'maxAttempts' | 'maxKeyMs'>, tenant: Tenant, record: KeyRecord, spread: number): Promise<KeyRecord> {
  const started = Date.now();
  const maxAttempts = options.maxAttempts ?? 40;
  const maxKeyMs = options.maxKeyMs ?? 90_000;
  const instances = options.instances;
  for (let n = 0; n < maxAttempts && !settled(record) && Date.now() - started < maxKeyMs; n++) {
    const live = instances.filter((instance) => instance.running);
    const pool = live.length > 0 ? live : instances;
    const target = pool[(spread + n) % pool.length];
    if (!target) break;
    const other = pool[(spread + n + 1) % pool.length];
    const race = n === 0 && other && other !== target && Math.random() < (options.raceShare ?? 0);
    const results = await Promise.all([attempt(target, tenant, record, options.attemptTimeoutMs), ...(race ? [attempt(other, tenant, record, options.attemptTimeoutMs)] : [])]);
    let wait = 0;
    for (const result of results) {
      take(record, result);
      const { status, retryAfter } = result.attempt;
      const seconds = retryAfter === null ? NaN : Number(retryAfter);
      wait = Math.max(wait, Number.isFinite(seconds) ? Math.min(seconds * 1000, 2_000) : status === 0 ? Math.min(100 * (n + 1), 1_000) : 100);
    }
    if (!settled(record)) await sleep(wait * (0.5 + Math.random() / 2));
  }
  return record;
}
