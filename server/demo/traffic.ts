// The demo traffic generator: drives the protected demo API the way real clients do, so a
// fresh `npm start` has every panel moving. Several tenants (two of them sharing key
// strings), steady payments and refunds, retries after simulated timeouts (replays),
// concurrent duplicates (conflicts), a buggy client reusing a key with another body
// (mismatches), an occasional handler that dies mid-work (stale claims) and bursts.
// Bounded (at most `maxInFlight` requests at once), loopback only, stopped with stop().
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import type { EndpointPolicy } from '@retrysafe/store';
import type { IdempotencyStore } from '@retrysafe/store';
import { REFUNDS_ENDPOINT } from './policies';
import { createTenant, type CreatedTenant } from './tenants';

export interface TrafficOptions {
  /** The server's own base URL; only loopback addresses are accepted. */
  baseUrl: string;
  pool: pg.Pool;
  store: IdempotencyStore;
  policyFor: (endpoint: string) => EndpointPolicy;
  tickMs?: number;
  maxInFlight?: number;
  random?: () => number;
  onError?: (error: unknown) => void;
}

const TENANT_PREFIX = 'Demo traffic';
const CURRENCIES = ['EUR', 'USD', 'GBP'];

interface SentRequest {
  path: string;
  apiKey: string;
  key: string;
  body: Record<string, unknown>;
}

export class TrafficGenerator {
  private timer: NodeJS.Timeout | null = null;
  private inFlight = 0;
  private tick = 0;
  private tenants: CreatedTenant[] = [];
  private readonly recent: SentRequest[] = [];
  private readonly payments = new Map<string, string[]>();
  private readonly random: () => number;

  constructor(private readonly options: TrafficOptions) {
    const host = new URL(options.baseUrl).hostname;
    if (!['127.0.0.1', 'localhost', '::1', '[::1]'].includes(host)) {
      throw new Error(`the traffic generator only sends to loopback, not ${host}`);
    }
    this.random = options.random ?? Math.random;
  }

  /** Creates this run's tenants (revoking earlier runs' ones) and starts sending. */
  async start(): Promise<void> {
    if (this.timer) return;
    await this.options.pool.query(`UPDATE tenants SET revoked_at = now() WHERE name LIKE $1 AND revoked_at IS NULL`, [`${TENANT_PREFIX} %`]);
    this.tenants = [];
    for (const name of ['Acme Books', 'Globex Travel', 'Initech Payroll']) {
      this.tenants.push(await createTenant(this.options.pool, `${TENANT_PREFIX} ${name}`));
    }
    this.timer = setInterval(() => this.step(), this.options.tickMs ?? 250);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  private pick<T>(items: readonly T[]): T {
    const item = items[Math.floor(this.random() * items.length)];
    if (item === undefined) throw new Error('pick from an empty list');
    return item;
  }

  private step(): void {
    this.tick += 1;
    const roll = this.random();
    if (this.tick % 240 === 0) {
      // A burst, about once a minute.
      for (let i = 0; i < 25; i += 1) this.newPayment();
    } else if (this.tick % 480 === 7) {
      void this.crashMidWork();
    } else if (roll < 0.45) this.newPayment();
    else if (roll < 0.62) this.newRefund();
    else if (roll < 0.8) this.retryRecent();
    else if (roll < 0.88) this.concurrentDuplicates();
    else if (roll < 0.93) this.buggyReuse();
    else this.sharedKeyString();
  }

  private send(request: SentRequest, remember = true): void {
    if (this.inFlight >= (this.options.maxInFlight ?? 8)) return;
    this.inFlight += 1;
    if (remember) {
      this.recent.push(request);
      if (this.recent.length > 50) this.recent.shift();
    }
    fetch(`${this.options.baseUrl}${request.path}`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${request.apiKey}`, 'Idempotency-Key': request.key, 'Content-Type': 'application/json' },
      body: JSON.stringify(request.body),
      signal: AbortSignal.timeout(10_000),
    })
      .then(async (response) => {
        const text = await response.text();
        if (request.path.endsWith('/payments') && response.status === 201) {
          const { id } = JSON.parse(text) as { id: string };
          const list = this.payments.get(request.apiKey) ?? [];
          list.push(id);
          if (list.length > 20) list.shift();
          this.payments.set(request.apiKey, list);
        }
      })
      .catch((error: unknown) => this.options.onError?.(error))
      .finally(() => (this.inFlight -= 1));
  }

  private newPayment(): void {
    const tenant = this.pick(this.tenants);
    this.send({
      path: '/api/v1/payments',
      apiKey: tenant.apiKey,
      key: `order-${randomUUID()}`,
      body: { amount: 100 + Math.floor(this.random() * 50_000), currency: this.pick(CURRENCIES), description: `Order ${Math.floor(this.random() * 100_000)}` },
    });
  }

  private newRefund(): void {
    const tenant = this.pick(this.tenants);
    const payment = this.payments.get(tenant.apiKey)?.at(-1 - Math.floor(this.random() * 3));
    if (!payment) { this.newPayment(); return; }
    this.send({ path: '/api/v1/refunds', apiKey: tenant.apiKey, key: `refund-${randomUUID()}`, body: { payment, amount: 1 + Math.floor(this.random() * 50) } });
  }

  /** A client that timed out and retries the same request: a replay. */
  private retryRecent(): void {
    if (this.recent.length === 0) { this.newPayment(); return; }
    this.send(this.pick(this.recent), false);
  }

  /** A double-clicked button: the same request three times at once. */
  private concurrentDuplicates(): void {
    const tenant = this.pick(this.tenants);
    const payment = this.payments.get(tenant.apiKey)?.at(-1);
    const request: SentRequest = payment
      ? { path: '/api/v1/refunds', apiKey: tenant.apiKey, key: `refund-${randomUUID()}`, body: { payment, amount: 1 } }
      : { path: '/api/v1/payments', apiKey: tenant.apiKey, key: `order-${randomUUID()}`, body: { amount: 500, currency: 'EUR' } };
    for (let i = 0; i < 3; i += 1) this.send(request, i === 0);
  }

  /** A buggy client reusing its key for a different request: a mismatch. */
  private buggyReuse(): void {
    const previous = this.recent.at(-1);
    if (!previous?.path.endsWith('/payments')) { this.newPayment(); return; }
    const amount = typeof previous.body.amount === 'number' ? previous.body.amount + 1 : 1;
    this.send({ ...previous, body: { ...previous.body, amount } }, false);
  }

  /** Two tenants whose integration tests both use the key "retry-1": independent keys. */
  private sharedKeyString(): void {
    const [first, second] = this.tenants;
    if (!first || !second) return;
    const key = `retry-${1 + Math.floor(this.random() * 3)}-${Math.floor(Date.now() / 600_000)}`;
    for (const tenant of [first, second]) {
      this.send({ path: '/api/v1/payments', apiKey: tenant.apiKey, key, body: { amount: 1_000, currency: 'EUR', description: 'integration test' } }, false);
    }
  }

  /** A refund handler that dies after claiming (its process crashed): a stale claim once the lease passes. */
  private async crashMidWork(): Promise<void> {
    const tenant = this.pick(this.tenants);
    try {
      await this.options.store.begin({
        principalId: tenant.principalId,
        endpoint: REFUNDS_ENDPOINT,
        method: 'POST',
        key: `refund-crashed-${randomUUID()}`,
        body: { payment: 'pay_0', amount: 1 },
        policy: this.options.policyFor(REFUNDS_ENDPOINT),
      });
      // Never finished, never abandoned: exactly what a crash leaves behind.
    } catch (error) {
      this.options.onError?.(error);
    }
  }
}
