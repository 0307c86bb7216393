// The demo traffic generator: drives the protected demo API the way real clients do, so a
// fresh `npm start` has every panel moving. Several tenants (two of them sharing key
// strings), steady payments and refunds, retries after simulated timeouts (replays),
// double-clicks (conflicts), a buggy client reusing a key with another body (mismatches), an
// occasional handler that dies mid-work (a stale claim, which its client retries later) and
// bursts. The trouble is paced by what was sent, not drawn at random, so that it stays under
// every alert threshold in every minute (a double-click per 40 refunds, a reused key per 80
// payments): the demo raises no alert of its own. An incident staged for practice (`npm run cli
// -- demo incident`, server/demo/incidents.ts) is polled for and played on top, by its own
// tenant, until it ends.
// Bounded (at most `maxInFlight` requests at once), loopback only, stopped with stop().
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { newCorrelationId, type EndpointPolicy } from '@retrysafe/store';
import type { IdempotencyStore } from '@retrysafe/store';
import { PAYMENTS_ENDPOINT, REFUNDS_ENDPOINT } from './policies';
import { readActiveIncidents, type IncidentKind } from './incidents';
import { createTenant, issueApiKey, type CreatedTenant } from './tenants';

/**
 * A new idempotency key as docs/adopting.md advises clients to make them: a UUIDv7 (the store's
 * own generator, time first), so each new key lands at the right-hand edge of its principal's
 * range of the unique index rather than on a random page of it.
 */
function demoKey(prefix: string): string {
  return `${prefix}-${newCorrelationId()}`;
}

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
  /** How long a crashed handler's client waits before retrying (default CRASH_RETRY_AFTER_MS). */
  crashRetryAfterMs?: number;
  /** How often staged incidents are looked for (default INCIDENT_POLL_MS); also once at start. */
  incidentPollMs?: number;
}

const TENANT_PREFIX = 'Demo traffic';
const CURRENCIES = ['EUR', 'USD', 'GBP'];
/** One double-click (two requests at once: at most one conflict) per this many refunds sent: at most 5% of a judged minute's refunds, under the 10% threshold. */
const REFUNDS_PER_DOUBLE_CLICK = 40;
/** One reused key (a mismatch) per this many payments sent: at most 5% of a judged minute's (20 claims), about 1% at the demo's pace, under the 5% threshold. */
const PAYMENTS_PER_REUSE = 80;
/** A crashed handler's client retries after this long: its claim is stale for a while (the claims page shows it), never the stale-claims alert's 10 minutes. */
const CRASH_RETRY_AFTER_MS = 120_000;
/** A staged incident starts being played at most this long after it was staged. */
const INCIDENT_POLL_MS = 5_000;
/** An incident plays one step per this many ticks (2 a second at the server's pace). */
const TICKS_PER_INCIDENT_STEP = 2;
/** key-reuse: each key is sent once, then reused with another body this many times (422s). */
const REUSES_PER_KEY = 4;
/** slow-claims: a held claim begins every this many ticks, at most SLOW_CLAIMS_HELD at once. */
const TICKS_PER_SLOW_CLAIM = 4;
const SLOW_CLAIMS_HELD = 1;
/** slow-claims: the client's first retry of a held request, this long after it (its second, 2 s later). */
const SLOW_RETRY_AFTER_MS = 500;

/** An incident being played: its tenant's API key (issued by this generator) and what it sent last. */
interface PlayedIncident {
  kind: IncidentKind;
  tenant: CreatedTenant;
  until: number;
  /** noisy-tenant, key-reuse: the payment request whose key is reused with other bodies. */
  reused: SentRequest | null;
  reuses: number;
  /** slow-claims: claims held now. */
  held: number;
}

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
  private paymentsSent = 0;
  private refundsSent = 0;
  private readonly crashed = new Set<NodeJS.Timeout>();
  private pollTimer: NodeJS.Timeout | null = null;
  private readonly incidents = new Map<string, PlayedIncident>();
  private polling = false;

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
    await this.pollIncidents();
    this.timer = setInterval(() => this.step(), this.options.tickMs ?? 250);
    this.timer.unref();
    this.pollTimer = setInterval(() => void this.pollIncidents(), this.options.incidentPollMs ?? INCIDENT_POLL_MS);
    this.pollTimer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    if (this.pollTimer) clearInterval(this.pollTimer);
    this.pollTimer = null;
    this.incidents.clear();
    for (const retry of this.crashed) clearTimeout(retry);
    this.crashed.clear();
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
    } else if (roll < 0.5) this.newPayment();
    else if (roll < 0.72) this.newRefund();
    else if (roll < 0.93) this.retryRecent();
    else this.sharedKeyString();
    this.playIncidents();
  }

  /**
   * Picks up the incidents staged since the last poll (issuing each tenant an API key of this
   * generator's: the one printed at creation was never kept) and forgets those that ended.
   * Never overlaps itself.
   */
  private async pollIncidents(): Promise<void> {
    if (this.polling) return;
    this.polling = true;
    try {
      const active = await readActiveIncidents(this.options.pool);
      const ids = new Set(active.map((incident) => incident.id));
      for (const id of this.incidents.keys()) if (!ids.has(id)) this.incidents.delete(id);
      for (const incident of active) {
        if (this.incidents.has(incident.id)) continue;
        const apiKey = await issueApiKey(this.options.pool, incident.principalId);
        this.incidents.set(incident.id, { kind: incident.kind, tenant: { principalId: incident.principalId, apiKey }, until: incident.until.getTime(), reused: null, reuses: 0, held: 0 });
      }
    } catch (error) {
      this.options.onError?.(error);
    } finally {
      this.polling = false;
    }
  }

  private playIncidents(): void {
    const now = Date.now();
    for (const [id, incident] of this.incidents) {
      if (incident.until <= now) {
        this.incidents.delete(id);
        continue;
      }
      if (incident.kind === 'slow-claims') {
        if (this.tick % TICKS_PER_SLOW_CLAIM === 0) void this.slowClaim(incident);
      } else if (this.tick % TICKS_PER_INCIDENT_STEP === 0) {
        if (incident.kind === 'noisy-tenant') this.noisyStep(incident);
        else this.keyReuseStep(incident);
      }
    }
  }

  /** A new payment of the incident's tenant (not retried by the demo's clients). */
  private incidentPayment(incident: PlayedIncident, prefix: string): SentRequest {
    const request: SentRequest = {
      path: '/api/v1/payments',
      apiKey: incident.tenant.apiKey,
      key: demoKey(prefix),
      body: { amount: 100_000 + Math.floor(this.random() * 50_000), currency: this.pick(CURRENCIES), description: `Order ${Math.floor(this.random() * 100_000)}` },
    };
    this.send(request, false);
    return request;
  }

  /** The same payment key again with another amount: a 422 (or a 409 while the first still runs). */
  private reuseWithOtherBody(incident: PlayedIncident, request: SentRequest): void {
    incident.reuses += 1;
    const amount = typeof request.body.amount === 'number' ? request.body.amount + incident.reuses : incident.reuses;
    this.send({ ...request, body: { ...request.body, amount } }, false);
  }

  /**
   * noisy-tenant: each step double-submits a refund (the same request twice at once: a 409 while
   * the first runs) and reuses its payment key with another body (a 422): conflicts on refunds
   * and mismatches on payments far over their shares.
   */
  private noisyStep(incident: PlayedIncident): void {
    const payment = this.payments.get(incident.tenant.apiKey)?.at(-1);
    if (!incident.reused || !payment) {
      // Until its first payment is answered (one a step: a processor failure is not waited on forever).
      incident.reused = this.incidentPayment(incident, 'drill-order');
      return;
    }
    const refund: SentRequest = { path: '/api/v1/refunds', apiKey: incident.tenant.apiKey, key: demoKey('drill-refund'), body: { payment, amount: 1 } };
    if (this.send(refund, false)) this.send(refund, false);
    this.reuseWithOtherBody(incident, incident.reused);
  }

  /** key-reuse: a client reusing each payment key for REUSES_PER_KEY other payments (422s). */
  private keyReuseStep(incident: PlayedIncident): void {
    if (!incident.reused || incident.reuses >= REUSES_PER_KEY) {
      incident.reused = this.incidentPayment(incident, 'drill-invoice');
      incident.reuses = 0;
      return;
    }
    this.reuseWithOtherBody(incident, incident.reused);
  }

  /**
   * slow-claims: the tenant's payment handler holds its claim (its transaction) past the
   * endpoint's lock timeout, and its client retries the same request twice meanwhile: the first
   * retry's claim waits the whole lock timeout out and is answered 409 (a conflict of this
   * tenant's, which names it in the principals table); the second waits for the held one to
   * commit and is replayed, its claim taking seconds (claim p99 over its objective on payments:
   * the check pends at once, fires after its 5 min). One held at a time (each holds three of the
   * pool's connections while it lasts).
   */
  private async slowClaim(incident: PlayedIncident): Promise<void> {
    if (incident.held >= SLOW_CLAIMS_HELD) return;
    incident.held += 1;
    const policy = this.options.policyFor(PAYMENTS_ENDPOINT);
    const request: SentRequest = {
      path: '/api/v1/payments',
      apiKey: incident.tenant.apiKey,
      key: demoKey('drill-slow'),
      body: { amount: 1_000 + Math.floor(this.random() * 50_000), currency: this.pick(CURRENCIES), description: 'slow handler' },
    };
    for (const after of [SLOW_RETRY_AFTER_MS, SLOW_RETRY_AFTER_MS + 2_000]) {
      // Kept with the crashed handlers' retries, so that stop() cancels it too.
      const retry = setTimeout(() => {
        this.crashed.delete(retry);
        this.send(request, false);
      }, after);
      retry.unref();
      this.crashed.add(retry);
    }
    try {
      await this.options.store.execute({
        principalId: incident.tenant.principalId,
        endpoint: PAYMENTS_ENDPOINT,
        method: 'POST',
        key: request.key,
        body: request.body,
        policy,
        mode: 'transactional',
        work: async ({ correlationId }) => {
          await new Promise((resolve) => setTimeout(resolve, policy.lockTimeoutMs + SLOW_RETRY_AFTER_MS + 1_000));
          const payment = { id: `pay_slow_${randomUUID()}`, ...request.body, status: 'succeeded', correlationId };
          return { status: 201, contentType: 'application/json', body: Buffer.from(JSON.stringify(payment)) };
        },
      });
    } catch (error) {
      this.options.onError?.(error);
    } finally {
      incident.held -= 1;
    }
  }

  /** Sends unless `maxInFlight` requests are out already; true when sent. */
  private send(request: SentRequest, remember = true): boolean {
    if (this.inFlight >= (this.options.maxInFlight ?? 8)) return false;
    this.inFlight += 1;
    fetch(`${this.options.baseUrl}${request.path}`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${request.apiKey}`, 'Idempotency-Key': request.key, 'Content-Type': 'application/json' },
      body: JSON.stringify(request.body),
      signal: AbortSignal.timeout(10_000),
    })
      .then(async (response) => {
        const text = await response.text();
        // Retried later only once answered (a client retries after a lost response, not while
        // its request runs): a replay, never a conflict.
        if (remember && response.status < 500) {
          this.recent.push(request);
          if (this.recent.length > 50) this.recent.shift();
        }
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
    return true;
  }

  private newPayment(): void {
    const tenant = this.pick(this.tenants);
    const request: SentRequest = {
      path: '/api/v1/payments',
      apiKey: tenant.apiKey,
      key: demoKey('order'),
      body: { amount: 100 + Math.floor(this.random() * 50_000), currency: this.pick(CURRENCIES), description: `Order ${Math.floor(this.random() * 100_000)}` },
    };
    if (!this.send(request)) return;
    this.paymentsSent += 1;
    if (this.paymentsSent % PAYMENTS_PER_REUSE === 0) this.buggyReuse(request);
  }

  private newRefund(): void {
    const tenant = this.pick(this.tenants);
    const payment = this.payments.get(tenant.apiKey)?.at(-1 - Math.floor(this.random() * 3));
    if (!payment) { this.newPayment(); return; }
    if (!this.send({ path: '/api/v1/refunds', apiKey: tenant.apiKey, key: demoKey('refund'), body: { payment, amount: 1 + Math.floor(this.random() * 50) } })) return;
    this.refundsSent += 1;
    if (this.refundsSent % REFUNDS_PER_DOUBLE_CLICK === 0) this.doubleClick(tenant, payment);
  }

  /** A client that timed out and retries the same request: a replay. */
  private retryRecent(): void {
    if (this.recent.length === 0) { this.newPayment(); return; }
    this.send(this.pick(this.recent), false);
  }

  /** A double-clicked refund button: the same request twice at once (the second a conflict while the first runs). */
  private doubleClick(tenant: CreatedTenant, payment: string): void {
    const request: SentRequest = { path: '/api/v1/refunds', apiKey: tenant.apiKey, key: demoKey('refund'), body: { payment, amount: 1 } };
    if (this.send(request)) this.send(request, false);
  }

  /** A buggy client reusing its key for a different request: a mismatch. */
  private buggyReuse(previous: SentRequest): void {
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

  /**
   * A refund handler that dies after claiming (its process crashed): a stale claim once the
   * lease passes, until its client retries the same request (CRASH_RETRY_AFTER_MS later), which
   * takes the claim over and completes it.
   */
  private async crashMidWork(): Promise<void> {
    const tenant = this.pick(this.tenants);
    // Before the tenant's first payment (the first crash comes 2 s after start), a refund of an
    // unknown payment: its retry is answered 404, which completes the claim all the same.
    const payment = this.payments.get(tenant.apiKey)?.at(-1) ?? 'pay_0';
    const request: SentRequest = { path: '/api/v1/refunds', apiKey: tenant.apiKey, key: demoKey('refund-crashed'), body: { payment, amount: 1 } };
    try {
      await this.options.store.begin({
        principalId: tenant.principalId,
        endpoint: REFUNDS_ENDPOINT,
        method: 'POST',
        key: request.key,
        body: request.body,
        policy: this.options.policyFor(REFUNDS_ENDPOINT),
      });
      // Never finished, never abandoned: exactly what a crash leaves behind.
    } catch (error) {
      this.options.onError?.(error);
      return;
    }
    if (!this.timer) return;
    const retry = setTimeout(() => {
      this.crashed.delete(retry);
      this.send(request, false);
    }, this.options.crashRetryAfterMs ?? CRASH_RETRY_AFTER_MS);
    retry.unref();
    this.crashed.add(retry);
  }
}
